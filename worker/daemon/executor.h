// Runs one leased job. The daemon knows nothing of how an evaluation is done: EngineExecutor runs
// the engine binary (pkb-eval) as a child process per job, and tests may plug in another.
//
//   EngineExecutor exec({.engine = "/opt/pkb/bin/pkb-eval", .scratch = "/var/tmp/pkb"});
//   CancelToken cancel;
//   v1::EvalResult r = exec.Run(lease, [](const v1::EvalEvent& e) { ... }, &cancel);
//
// Run blocks until the job ends and always returns a verdict: the engine's, or TIMEOUT,
// CANCELLED or INTERNAL when the run was cut short or the engine itself failed. Compile does the
// same for a compile task (pkb-eval --compile-only): COMPILED, COMPILE_ERROR, REJECTED, or the
// same TIMEOUT, CANCELLED and INTERNAL. Both may run at once from several threads.
#ifndef PKB_WORKER_DAEMON_EXECUTOR_H_
#define PKB_WORKER_DAEMON_EXECUTOR_H_

#include <sys/types.h>

#include <functional>
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
    if (pgid_ > 0) KillGroup(pgid_);
  }
  bool cancelled() {
    absl::MutexLock lock(&mu_);
    return cancelled_;
  }
  // The executor tells where the job's processes are (and learns if it was cancelled already).
  void SetProcessGroup(pid_t pgid) {
    absl::MutexLock lock(&mu_);
    pgid_ = pgid;
    if (cancelled_ && pgid_ > 0) KillGroup(pgid_);
  }

 private:
  static void KillGroup(pid_t pgid);
  absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  pid_t pgid_ ABSL_GUARDED_BY(mu_) = 0;
};

class Executor {
 public:
  using EventCallback = std::function<void(const v1::EvalEvent&)>;
  virtual ~Executor() = default;
  // Streams the job's non-final events to `on_event`; returns the verdict.
  virtual v1::EvalResult Run(const v1::Lease& lease, const EventCallback& on_event,
                             CancelToken* cancel) = 0;
  // Compiles the task's source, nothing more. This default answers INTERNAL: an executor that
  // cannot compile (a worker that has none advertises no compile slots).
  virtual v1::EvalResult Compile(const v1::CompileTask& task, CancelToken* cancel);
};

struct EngineExecutorOptions {
  std::string engine;   // the pkb-eval binary
  std::string scratch;  // a fresh folder per job is made under it
};

class EngineExecutor : public Executor {
 public:
  explicit EngineExecutor(EngineExecutorOptions options) : options_(std::move(options)) {}
  v1::EvalResult Run(const v1::Lease& lease, const EventCallback& on_event,
                     CancelToken* cancel) override;
  v1::EvalResult Compile(const v1::CompileTask& task, CancelToken* cancel) override;

 private:
  // pkb-eval on the spec and source, in a fresh scratch folder (`prefix`XXXXXX), killed after
  // `timeout`; `extra` are more flags (--compile-only). `what` names the work in messages;
  // `background` work runs at a lower CPU priority (nice 10) than the node's job.
  v1::EvalResult RunEngine(const v1::EvalSpec& spec, const std::string& source,
                           const std::string& job_key, const std::vector<std::string>& extra,
                           const char* prefix, const char* what, bool background,
                           absl::Duration timeout, const EventCallback& on_event,
                           CancelToken* cancel);

  EngineExecutorOptions options_;
};

}  // namespace pkb

#endif  // PKB_WORKER_DAEMON_EXECUTOR_H_
