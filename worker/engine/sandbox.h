// The sandbox that every process touching a submission runs in: the compiler and the rank
// processes.
//
//   SandboxPolicy p;  p.scratch = job_dir;  p.gpu = true;
//   p.read_only = {install_dir};
//   absl::StatusOr<std::vector<std::string>> argv = SandboxCommand(p, {"pkb-rank", ...});
//
// Built on bubblewrap (Debian's `bubblewrap`) and util-linux's `prlimit` and `setpriv`, not on our
// own namespace code. What the wrapped command gets:
//   - an unprivileged uid: when we are root, setpriv drops to `uid`:`gid` (nobody) before bwrap,
//     and bwrap's user namespace leaves no capability in the host's namespaces;
//   - new user, pid, network, IPC, UTS and cgroup namespaces: no network beyond its own loopback,
//     no view of the host's processes, and all processes of one command share them (the W ranks
//     of a job talk over loopback and /dev/shm inside one sandbox);
//   - a filesystem of read-only binds: /usr (and the /bin, /lib links into it), a few non-secret
//     files of /etc, `read_only`, and on GPU runs /sys; one writable folder, `scratch`; a private
//     /tmp and /dev/shm; /dev holds null, zero, random... and, on GPU runs, the /dev/nvidia* nodes;
//   - an environment reduced to an allow-list (SandboxEnvironment), so tokens in the daemon's
//     environment never reach a submission;
//   - resource limits: processes, file size, open files, CPU time, no core dumps;
//   - --die-with-parent and a new session: killing the process group we start kills the sandbox's
//     pid namespace and everything in it.
// The wall-clock limit stays with the caller (RunSubprocess, RankLauncher).
#ifndef PKB_WORKER_ENGINE_SANDBOX_H_
#define PKB_WORKER_ENGINE_SANDBOX_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pkb {

struct SandboxPolicy {
  std::string bwrap = "bwrap";  // path or name of bubblewrap
  std::string scratch;          // the only writable folder, at the same path inside
  // Host folders or files visible read-only at their real path (links resolved): refer to what
  // is inside by that path, as a link to it does not exist in the sandbox.
  std::vector<std::string> read_only;
  bool gpu = false;             // bind the NVIDIA device nodes and /sys
  std::vector<int> gpu_minors;  // with gpu: only these GPUs' nodes (gpu_select.h); {}: all
  uid_t uid = 65534;            // the uid and gid taken when we are root
  gid_t gid = 65534;
  int64_t max_processes = 4096;        // RLIMIT_NPROC (threads count: CUDA, NCCL and OpenMP)
  int64_t max_file_bytes = 8LL << 30;  // RLIMIT_FSIZE
  int64_t max_open_files = 4096;       // RLIMIT_NOFILE
  int64_t max_cpu_seconds = 0;         // RLIMIT_CPU per process; 0: none (the wall clock rules)
};

// argv that runs `command` inside the sandbox. Fails when `scratch` is not an absolute folder or
// a read-only path does not exist. When we are root, chowns `scratch` to the sandbox's uid.
absl::StatusOr<std::vector<std::string>> SandboxCommand(const SandboxPolicy& policy,
                                                        const std::vector<std::string>& command);

// Runs `true` in a sandbox of this policy: OK when namespaces, binds and the uid change all work
// on this machine, otherwise the reason (bwrap missing, user namespaces disabled...).
absl::Status ProbeSandbox(const SandboxPolicy& policy);

// The variables of our environment a sandboxed process may see (PATH, LD_LIBRARY_PATH, CUDA_*,
// NCCL_*, OMPI_*/PMIX_*, OMP_*, LANG, TZ...), with HOME and TMPDIR pointed at `home`, plus
// `extra` ("KEY=VALUE"). Everything else (tokens, the coordinator's address) is dropped.
std::vector<std::string> SandboxEnvironment(const std::string& home,
                                            const std::vector<std::string>& extra = {});

// Folders of the shared libraries mapped into this process outside /usr (libtorch from a Python
// environment, libraries carried beside the binaries): the rank processes need the same ones.
std::vector<std::string> LoadedLibraryDirs();

}  // namespace pkb

#endif  // PKB_WORKER_ENGINE_SANDBOX_H_
