// Runs one leased job. The daemon knows nothing of how an evaluation is done: EngineExecutor runs
// the engine binary (pkb-eval) as a child process per job, and tests may plug in another.
//
//   EngineExecutor exec({.engine = "/opt/pkb/bin/pkb-eval", .scratch = "/var/tmp/pkb"});
//   CancelToken cancel;
//   v1::EvalResult r = exec.Run(lease, on_event, on_verdict, on_quiet, &cancel);
//
// Run blocks until the job ends and always returns a verdict: the engine's, or TIMEOUT,
// CANCELLED or INTERNAL when the run was cut short or the engine itself failed. Compile does the
// same for a compile task (pkb-eval --compile-only): COMPILED, COMPILE_ERROR, REJECTED, or the
// same TIMEOUT, CANCELLED and INTERNAL. Both may run at once from several threads.
#ifndef PKB_WORKER_DAEMON_EXECUTOR_H_
#define PKB_WORKER_DAEMON_EXECUTOR_H_

#include <signal.h>
#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "pkb/v1/result.pb.h"
#include "pkb/v1/worker.pb.h"

namespace pkb {

// Cancels a running job from another thread: kills its process group.
class CancelToken {
 public:
  void Cancel() {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    if (pgid_ > 0 && !finished_) {
      // The whole tree: processes in sessions of their own (a compile's nvcc, which RunSubprocess
      // starts in one) would run on, unseen by the node's compile entries, or stay stopped.
      // Stopped first, so that none starts a child the kill would miss; then killed.
      for (pid_t pid : SignalTree(pgid_, SIGSTOP)) kill(pid, SIGKILL);
      KillGroup(pgid_);
    }
  }
  bool cancelled() {
    absl::MutexLock lock(&mu_);
    return cancelled_;
  }
  // Stops (SIGSTOP) or resumes (SIGCONT) the run's process and everything it started, whatever
  // their process group or session: a compile beside a job that is being timed waits meanwhile.
  // The processes stopped (none when resuming). A run whose process is not known yet (it is
  // starting) is waited for, kProcessWait at most, unless it is over (Finish); one that says
  // nothing for that long runs on.
  std::vector<pid_t> Pause(bool paused) {
    absl::MutexLock lock(&mu_);
    if (paused_ == paused) return {};
    paused_ = paused;
    if (paused && pgid_ <= 0) {
      mu_.AwaitWithTimeout(absl::Condition(
                               +[](CancelToken* t) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                                 return t->pgid_ > 0 || t->cancelled_ || t->finished_;
                               },
                               this),
                           kProcessWait);
    }
    if (pgid_ <= 0 || cancelled_) return {};
    std::vector<pid_t> signalled = SignalTree(pgid_, paused ? SIGSTOP : SIGCONT);
    if (!paused) signalled.clear();
    return signalled;
  }
  // The run is over (its process ended, or never started): a pause no longer waits for it.
  void Finish() {
    absl::MutexLock lock(&mu_);
    finished_ = true;
  }
  // How long Pause waits for a starting run's process to be known (its shell prints it first).
  static constexpr absl::Duration kProcessWait = absl::Milliseconds(500);
  // The executor tells where the job's processes are (and learns if it was cancelled already).
  void SetProcessGroup(pid_t pgid) {
    absl::MutexLock lock(&mu_);
    pgid_ = pgid;
    if (cancelled_ && pgid_ > 0) KillGroup(pgid_);
  }

 private:
  static void KillGroup(pid_t pgid);
  // `sig` to `root` and to every process descended from it (/proc's parent links), parents first;
  // the processes signalled.
  static std::vector<pid_t> SignalTree(pid_t root, int sig);
  absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool paused_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  pid_t pgid_ ABSL_GUARDED_BY(mu_) = 0;
};

class Executor {
 public:
  using EventCallback = std::function<void(const v1::EvalEvent&)>;
  using VerdictCallback = std::function<void(const v1::EvalResult&)>;
  // Called once, when the job is about to be timed (its first BENCHMARKING event, before that goes
  // to on_event): returns once the worker's other work is stopped, with how many compile tasks
  // ran beside the job (EvalResult.compiles_beside). The job is timed after it returns.
  // Empty: nothing else of the caller runs (0).
  using QuietCallback = std::function<int()>;
  virtual ~Executor() = default;
  // Streams the job's non-final events to `on_event`; returns the verdict once the job's
  // processes are gone. The engine's verdict also goes to `on_verdict` (when set) the moment the
  // engine gives it, once: the engine may give it before its rank processes have ended (their
  // devices' teardown), and Run returns after that. Run's verdict is the same one, unless the
  // engine then failed (INTERNAL) or the job was cut short (TIMEOUT, CANCELLED).
  virtual v1::EvalResult Run(const v1::Lease& lease, const EventCallback& on_event,
                             const VerdictCallback& on_verdict, const QuietCallback& on_quiet,
                             CancelToken* cancel) = 0;
  // Compiles the task's source, nothing more. This default answers INTERNAL: an executor that
  // cannot compile (a worker that has none advertises no compile slots).
  virtual v1::EvalResult Compile(const v1::CompileTask& task, CancelToken* cancel);
};

struct EngineExecutorOptions {
  std::string engine;   // the pkb-eval binary
  std::string scratch;  // a fresh folder per job is made under it
  // As soon as a job's verdict is out (or after a job that gave none), start the engine for the
  // next one (pkb-eval --standby) with rank processes
  // for the same W and backend: their process start, libraries and host processes are ready
  // when the job comes, which then only writes its spec. A job of another shape still saves
  // the engine's start (its ranks are replaced). Nothing of a job is reused by the next.
  bool standby = false;
  // GPU jobs: pkb-eval --settle-baseline (engine.h EvalOptions::settle_baseline): a job whose
  // reference this node has measured fewer times first times it again in fresh processes. 0: off.
  int settle_baseline = 0;
  // GPU jobs: pkb-eval --baseline-max-age-hours (EvalOptions::baseline_max_age). 0: the engine's.
  double baseline_max_age_hours = 0;
  // pkb-eval --gpus (gpu_select.h): the UUIDs of this worker's share of the node's GPUs,
  // comma-separated, given to every engine it starts. Empty: the whole node.
  std::string gpus;
  // Compile tasks (a Check's, a queued job's compile ahead) run on these CPUs, off the cores a
  // job's ranks are pinned to (core_pinning.h CpusBesideRanks), so that a compile beside a timed
  // job shares no core with it. Empty: anywhere.
  std::vector<int> background_cpus;
};

class EngineExecutor : public Executor {
 public:
  explicit EngineExecutor(EngineExecutorOptions options);
  ~EngineExecutor() override;
  v1::EvalResult Run(const v1::Lease& lease, const EventCallback& on_event,
                     const VerdictCallback& on_verdict, const QuietCallback& on_quiet,
                     CancelToken* cancel) override;
  v1::EvalResult Compile(const v1::CompileTask& task, CancelToken* cancel) override;
  // Whether an engine started ahead waits for the next job (options.standby).
  bool standby_waiting();

 private:
  struct Standby;
  // Starts the engine for the job after `last` (options.standby), unless one waits already.
  void StartStandby(const v1::EvalSpec& last);
  // The engine's --settle-baseline and --baseline-max-age-hours for a job of `spec` (GPU jobs
  // only).
  std::vector<std::string> SettleArgs(const v1::EvalSpec& spec) const;
  // The job on the engine started ahead; nullopt when it could not take it (it died, or its FIFO
  // never opened): the job then runs on an engine of its own. `next` runs once its verdict is in
  // (no lock held), while the engine still ends.
  std::optional<v1::EvalResult> RunOnStandby(Standby& standby, const v1::Lease& lease,
                                             const EventCallback& on_event,
                                             const VerdictCallback& on_verdict,
                                             const QuietCallback& on_quiet,
                                             const std::function<void()>& next, CancelToken* cancel,
                                             absl::Duration timeout);

  // pkb-eval on the spec and source, in a fresh scratch folder (`prefix`XXXXXX), killed after
  // `timeout`; `extra` are more flags (--compile-only). `what` names the work in messages;
  // `background` work runs at a lower CPU priority (nice 10) than the node's job. With
  // `on_quiet`, the engine waits for its word before timing (pkb-eval --quiet-from).
  v1::EvalResult RunEngine(const v1::EvalSpec& spec, const std::string& source,
                           const std::string& job_key, const std::vector<std::string>& extra,
                           const char* prefix, const char* what, bool background,
                           absl::Duration timeout, const EventCallback& on_event,
                           const VerdictCallback& on_verdict, const QuietCallback& on_quiet,
                           CancelToken* cancel);

  EngineExecutorOptions options_;
  absl::Mutex standby_mu_;
  std::unique_ptr<Standby> standby_ ABSL_GUARDED_BY(standby_mu_);
};

// The command line that starts `engine` (its own arguments follow): a shell that prints its pid,
// then the engine at nice 10 where `background` (and on `background_cpus`, util-linux's taskset,
// where given), dying with this process (setpriv --pdeathsig), and not at all where this process
// is no longer its parent once that signal is armed. Exposed for tests.
std::vector<std::string> EngineCommand(const std::string& engine, bool background,
                                       const std::vector<int>& background_cpus = {});

}  // namespace pkb

#endif  // PKB_WORKER_DAEMON_EXECUTOR_H_
