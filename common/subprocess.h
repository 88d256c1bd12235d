// Running child processes with a wall-clock limit that kills the whole process group.
//
//   SubprocessOptions opts;
//   opts.argv = {"nvcc", "-c", "x.cu"};
//   opts.timeout = absl::Seconds(60);
//   absl::StatusOr<SubprocessResult> r = RunSubprocess(opts);
//
// Every child starts in a new process group (and session), so a timeout or a crash of one
// process takes down everything it spawned. Thread-safe: each call owns its child.
#ifndef PKB_COMMON_SUBPROCESS_H_
#define PKB_COMMON_SUBPROCESS_H_

#include <sys/types.h>

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pkb {

struct SubprocessOptions {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;  // added to (or replacing) the parent's environment
  bool clear_env = false;                  // start from an empty environment instead
  std::string cwd;
  absl::Duration timeout = absl::InfiniteDuration();
  size_t max_output_bytes = 1 << 20;  // stdout and stderr are each truncated to this
  bool merge_stderr = false;          // stderr into the stdout capture
  // Called with each complete line of stdout as it arrives (besides capturing it).
  std::function<void(const std::string&)> on_stdout_line;
};

struct SubprocessResult {
  int exit_code = -1;  // valid when !signaled
  bool signaled = false;
  int term_signal = 0;
  bool timed_out = false;  // killed by the wall-clock limit
  std::string out;
  std::string err;
  absl::Duration elapsed;
  std::string Describe() const;  // "exit code 1", "killed by signal 11 (Segmentation fault)"...
};

// Runs the child to completion (or to the limit). An error status means the child could not be
// started at all; a child that fails is an OK status with a non-zero result.
absl::StatusOr<SubprocessResult> RunSubprocess(const SubprocessOptions& options);

// Sends `sig` to a whole process group, ignoring a group that is already gone.
void KillProcessGroup(pid_t pgid, int sig);

// Runs `fn` with the children that RunSubprocess calls (on any thread) are running now, and
// holds off new ones meanwhile: a reaper of orphans (a child subreaper's, RankLauncher) kills
// only what is not in the set, and RunSubprocess's own children are never taken for orphans.
// An error of RunSubprocess says so when its child was reaped by someone else all the same.
void WithSubprocessesHeld(const std::function<void(const std::set<pid_t>&)>& fn);

// A process's state letter (R, S, T, Z...) and parent, from /proc/<pid>/stat.
struct ProcStat {
  char state = 0;
  pid_t ppid = 0;
};
// Process `pid`'s ProcStat; nullopt when it cannot be read (it has ended, or never was). Read
// with read(2), not a stream: a process that ends between the open and the read makes the read
// fail (ESRCH), which a std::istreambuf_iterator turns into an exception (std::terminate in a
// thread or a destructor).
std::optional<ProcStat> ReadProcStat(pid_t pid);

}  // namespace pkb

#endif  // PKB_COMMON_SUBPROCESS_H_
