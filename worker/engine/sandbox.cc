#include "worker/engine/sandbox.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/subprocess.h"
#include "worker/engine/gpu_select.h"

extern char** environ;

namespace pkb {
namespace {

namespace fs = std::filesystem;

// Files of /etc that the dynamic loader, nvcc, gcc and OpenMPI read, none of them secret.
constexpr const char* kEtcFiles[] = {
    "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
    "/etc/passwd",      "/etc/group",      "/etc/hosts",        "/etc/nsswitch.conf",
    "/etc/localtime",   "/etc/openmpi",    "/etc/gcc",
};

// Variables a sandboxed process may inherit: the toolchain's and the runtime's knobs.
// OPAL_, PMIX_ and HWLOC_ place an OpenMPI installed outside /usr (scripts/device/openmpi-tree.sh).
constexpr const char* kAllowedPrefixes[] = {"CUDA_", "NCCL_",  "NVIDIA_", "OMPI_",
                                            "OPAL_", "PMIX_",  "HWLOC_",  "OMP_",
                                            "MKL_",  "TORCH_", "LC_"};
constexpr const char* kAllowedNames[] = {"PATH", "LD_LIBRARY_PATH", "LANG", "TZ", "TERM"};

void AddRootLinks(std::vector<std::string>& a) {
  for (const char* p : {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}) {
    std::error_code ec;
    auto st = fs::symlink_status(p, ec);
    if (ec) continue;
    if (fs::is_symlink(st)) {
      a.insert(a.end(), {"--symlink", fs::read_symlink(p, ec).string(), p});
    } else if (fs::is_directory(st)) {
      a.insert(a.end(), {"--ro-bind", p, p});
    }
  }
}

// Whether `uid`:`gid` (not in any other group) may reach `path`: search permission on every
// folder above it, and read permission on it. bwrap resolves the paths it binds as that uid.
bool ReachableBy(const std::string& path, uid_t uid, gid_t gid) {
  auto allowed = [&](const struct stat& st, mode_t other, mode_t group, mode_t user) {
    if (st.st_uid == uid) return (st.st_mode & user) != 0;
    if (st.st_gid == gid) return (st.st_mode & group) != 0;
    return (st.st_mode & other) != 0;
  };
  fs::path p = fs::absolute(path);
  struct stat st;
  for (fs::path dir = p.parent_path();; dir = dir.parent_path()) {
    if (stat(dir.c_str(), &st) != 0 || !allowed(st, S_IXOTH, S_IXGRP, S_IXUSR)) return false;
    if (dir == dir.root_path()) break;
  }
  return stat(p.c_str(), &st) == 0 && allowed(st, S_IROTH, S_IRGRP, S_IRUSR);
}

}  // namespace

std::vector<std::string> SandboxEnvironment(const std::string& home,
                                            const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    std::string name = kv.substr(0, kv.find('='));
    bool keep = false;
    for (const char* n : kAllowedNames) keep |= name == n;
    for (const char* p : kAllowedPrefixes) keep |= absl::StartsWith(name, p);
    if (keep) env.push_back(kv);
  }
  env.push_back("HOME=" + home);
  env.push_back("TMPDIR=" + home);
  for (const auto& kv : extra) env.push_back(kv);
  return env;
}

absl::StatusOr<std::vector<std::string>> SandboxCommand(const SandboxPolicy& policy,
                                                        const std::vector<std::string>& command) {
  if (policy.scratch.empty() || policy.scratch[0] != '/' || !fs::is_directory(policy.scratch)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sandbox: scratch must be an existing absolute folder, got '", policy.scratch, "'"));
  }
  std::vector<std::string> a = {"prlimit", absl::StrCat("--nproc=", policy.max_processes),
                                absl::StrCat("--fsize=", policy.max_file_bytes),
                                absl::StrCat("--nofile=", policy.max_open_files), "--core=0"};
  if (policy.max_cpu_seconds > 0) a.push_back(absl::StrCat("--cpu=", policy.max_cpu_seconds));
  if (geteuid() == 0) {
    // Root would keep its uid for file checks inside the user namespace: become nobody first.
    if (chown(policy.scratch.c_str(), policy.uid, policy.gid) != 0) {
      return absl::InternalError(absl::StrCat("sandbox: cannot chown ", policy.scratch));
    }
    if (!ReachableBy(policy.scratch, policy.uid, policy.gid)) {
      return absl::FailedPreconditionError(absl::StrCat("sandbox: scratch '", policy.scratch,
                                                        "' is below a folder uid ", policy.uid,
                                                        " cannot search"));
    }
    a.insert(a.end(), {"setpriv", absl::StrCat("--reuid=", policy.uid),
                       absl::StrCat("--regid=", policy.gid), "--clear-groups"});
  }
  a.insert(a.end(), {policy.bwrap, "--die-with-parent", "--new-session", "--unshare-all",
                     "--ro-bind", "/usr", "/usr"});
  AddRootLinks(a);
  for (const char* f : kEtcFiles) a.insert(a.end(), {"--ro-bind-try", f, f});
  a.insert(a.end(), {"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/dev/shm", "--tmpfs", "/tmp"});
  std::set<std::string> seen;
  for (const auto& p : policy.read_only) {
    if (p.empty()) {
      // A caller that failed to resolve a path: refuse it rather than bind something else.
      return absl::InvalidArgumentError("sandbox: an empty read-only path was given");
    }
    // Bound at its real path: callers refer to what they bind by that path too (compiler.cc).
    std::error_code ec;
    std::string abs = fs::canonical(p, ec).string();
    if (ec) {
      return absl::InvalidArgumentError(
          absl::StrCat("sandbox: read-only path '", p, "' does not exist (", ec.message(), ")"));
    }
    if (absl::StartsWith(abs, "/usr/") || !seen.insert(abs).second) continue;
    if (geteuid() == 0 && !ReachableBy(abs, policy.uid, policy.gid)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "sandbox: '", abs, "' is not readable by uid ", policy.uid,
          " (a folder above it lacks search permission for others): install the engine, its "
          "libraries and the include folders where every user can read them"));
    }
    a.insert(a.end(), {"--ro-bind", abs, abs});
  }
  if (policy.gpu) {
    // NCCL and the CUDA runtime read the PCI and NUMA topology from /sys.
    a.insert(a.end(), {"--ro-bind", "/sys", "/sys"});
    // The driver's nodes, and of the GPUs' own only the job's (another job may be timed on the
    // others).
    for (const std::string& node : GpuDeviceNodes("/dev", policy.gpu_minors))
      a.insert(a.end(), {"--dev-bind", node, node});
  }
  // The root (a tmpfs holding the mount points) read-only too: only scratch, /tmp and /dev/shm
  // take writes.
  a.insert(a.end(), {"--bind", policy.scratch, policy.scratch, "--remount-ro", "/", "--chdir",
                     policy.scratch, "--"});
  a.insert(a.end(), command.begin(), command.end());
  return a;
}

std::vector<std::string> LoadedLibraryDirs() {
  std::set<std::string> dirs;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    std::string path = line.substr(slash);
    if (!absl::StrContains(path, ".so") || absl::StartsWith(path, "/usr/")) continue;
    dirs.insert(fs::path(path).parent_path().string());
  }
  return {dirs.begin(), dirs.end()};
}

absl::Status ProbeSandbox(const SandboxPolicy& policy) {
  SandboxPolicy p = policy;
  std::string dir = absl::StrCat("/tmp/pkb-sandbox-probe-", getpid());
  std::error_code ec;
  fs::create_directories(dir, ec);
  p.scratch = dir;
  p.read_only.clear();
  auto argv = SandboxCommand(p, {"/bin/sh", "-c", "touch ./probe && test ! -w /usr"});
  if (!argv.ok()) {
    fs::remove_all(dir, ec);
    return argv.status();
  }
  SubprocessOptions o;
  o.argv = *argv;
  o.merge_stderr = true;
  o.timeout = absl::Seconds(30);
  auto r = RunSubprocess(o);
  bool wrote = fs::exists(dir + "/probe");
  fs::remove_all(dir, ec);
  if (!r.ok()) return r.status();
  if (r->exit_code != 0 || !wrote) {
    return absl::FailedPreconditionError(
        absl::StrCat("the sandbox does not work on this machine (", r->Describe(), "): ", r->out));
  }
  return absl::OkStatus();
}

}  // namespace pkb
