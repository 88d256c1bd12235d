// The worker daemon's connection to the coordinator: dials out, registers, heartbeats at the
// interval the coordinator chose, runs each leased job on an Executor (one at a time), streams
// its events, honours cancel and drain, and reconnects with backoff. A job keeps running across a
// reconnect: its events wait in an outbox and the new Register lists it, so the coordinator
// resumes the lease instead of running it again.
//
// Compile tasks (CompileTask, for Evaluation.Check with compile) run beside the job on
// capabilities.compile_slots threads of their own (Executor::Compile; more wait in a queue), and
// each answers with a CompileTaskResult. They are not leases: a task whose stream ended is
// answered by the coordinator, so its result is dropped when no stream is up.
//
//   EngineExecutor executor({...});
//   WorkerDaemon daemon(options, &executor);
//   daemon.Run();   // returns once drained (RequestDrain, or the coordinator asked) and idle
#ifndef PKB_WORKER_DAEMON_WORKER_DAEMON_H_
#define PKB_WORKER_DAEMON_WORKER_DAEMON_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "pkb/v1/worker.grpc.pb.h"
#include "worker/daemon/executor.h"

namespace pkb {

// Told of the daemon's life: metrics (worker/daemon/worker_metrics.h) and systemd readiness.
// Called from the daemon's threads without its lock held; implementations must be thread-safe.
class WorkerObserver {
 public:
  virtual ~WorkerObserver() = default;
  virtual void Connected(bool connected) {}  // registered with the coordinator, or the stream ended
  virtual void JobStarted() {}
  virtual void JobFinished(const v1::EvalResult& result, absl::Duration took) {}
  virtual void HealthChecked(bool healthy) {}
};

struct WorkerDaemonOptions {
  std::string coordinator = "127.0.0.1:7311";
  std::string worker_id;
  std::string token;   // bearer token of role worker; empty on an open coordinator
  std::string tls_ca;  // PEM root certificates: TLS to the coordinator; empty: plaintext
  v1::WorkerCapabilities capabilities;
  bool healthy = true;
  std::string unhealthy_reason;
  // Run after every job, its DONE sent already but its slot still taken (Heartbeat.finishing): an
  // error marks the node unhealthy: it stays connected but takes no more leases (restart it once
  // fixed). Empty: none.
  std::function<absl::Status()> health_check;
  // Run instead after a job that ended RUNTIME_ERROR, TIMEOUT or INTERNAL (a crash, a fault or a
  // hang may have left the GPU unusable): known-good work on the GPUs (pkb-eval --gpu-selftest).
  std::function<absl::Status()> failure_health_check;
  WorkerObserver* observer = nullptr;  // must outlive the daemon
  absl::Duration min_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(5);
};

class WorkerDaemon {
 public:
  WorkerDaemon(WorkerDaemonOptions options, Executor* executor);
  ~WorkerDaemon();

  void Run();
  // Async-signal-safe: stop taking jobs, finish the one running, then leave.
  void RequestDrain() { drain_requested_ = true; }

 private:
  using Stream = grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>;

  // One connection's life; returns when the stream ends.
  void Session();
  void HeartbeatLoop(absl::Duration interval, std::atomic<bool>* stop);
  bool Send(const v1::WorkerMessage& m);
  // Queues a job event and sends what the outbox holds while the stream is up.
  void Post(v1::JobEvent event);
  void FlushLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartJob(const v1::Lease& lease);
  // Tells the coordinator the worker's state now (healthy, finishing, its job) when a stream is up.
  void SendHeartbeatLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // No job (nor the end of the last one), nothing to send, and no compile task queued or running
  // (a drain waits for them).
  bool IdleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !job_running_ && !finishing_ && outbox_.empty() && compiles_busy_ == 0;
  }
  // Queues a compile task for the compile threads (or answers at once when the queue is full).
  void QueueCompile(v1::CompileTask task);
  // Draining: compiles ahead (nobody waits for them) are stopped, queued ones answered CANCELLED.
  void StopAheadCompiles() ABSL_LOCKS_EXCLUDED(mu_, compile_mu_);
  // While the job is timed (BENCHMARKING, to its verdict), compile tasks wait: none starts, and
  // the running ones are stopped, so that nothing of theirs shares the host with the timed ranks.
  void PauseCompiles(bool paused) ABSL_LOCKS_EXCLUDED(compile_mu_);
  // Compile tasks that ran beside the job until now (EvalResult.compiles_beside): those running
  // when it began (BeginJobCompiles) and those started since, less the job's own compile ahead
  // (the compile of its source, which the job waits for) and those that ended as cache hits (no
  // compiler ran: a lookup of milliseconds).
  void BeginJobCompiles(const std::string& source) ABSL_LOCKS_EXCLUDED(compile_mu_);
  int CompilesBesideJob() ABSL_LOCKS_EXCLUDED(compile_mu_);
  // Answers a compile task that will not run.
  void AnswerCompileTask(const std::string& task_id, v1::Status status, const std::string& message)
      ABSL_LOCKS_EXCLUDED(mu_);
  // One compile thread: takes tasks until the daemon ends.
  void CompileLoop();
  bool CompileReadyLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(compile_mu_) {
    return compile_stop_ || (!compiles_paused_ && !compile_queue_.empty());
  }

  const WorkerDaemonOptions options_;
  Executor* const executor_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Worker::Stub> stub_;
  std::atomic<bool> drain_requested_{false};

  absl::Mutex mu_;
  Stream* stream_ ABSL_GUARDED_BY(mu_) = nullptr;
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::deque<v1::JobEvent> outbox_ ABSL_GUARDED_BY(mu_);
  bool job_running_ ABSL_GUARDED_BY(mu_) = false;
  std::string job_id_ ABSL_GUARDED_BY(mu_);  // running, or its DONE not yet delivered
  std::shared_ptr<CancelToken> cancel_ ABSL_GUARDED_BY(mu_);
  bool drain_sent_ ABSL_GUARDED_BY(mu_) = false;
  bool healthy_ ABSL_GUARDED_BY(mu_);
  // The job's DONE is out, its engine's end or the health check after it not yet over.
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  std::string unhealthy_reason_ ABSL_GUARDED_BY(mu_);
  std::thread job_thread_;

  absl::Mutex compile_mu_;
  std::deque<v1::CompileTask> compile_queue_ ABSL_GUARDED_BY(compile_mu_);
  bool compile_stop_ ABSL_GUARDED_BY(compile_mu_) = false;
  // The job is being timed: no compile task starts, and those running are stopped (SIGSTOP).
  bool compiles_paused_ ABSL_GUARDED_BY(compile_mu_) = false;
  // While some are stopped: a child of this process that sends them SIGCONT once the pipe's write
  // end closes, at the resume or at this process's death (a kill -9 would otherwise leave them
  // stopped for good: a compiler started in a session of its own outlives its engine).
  pid_t stop_guard_pid_ ABSL_GUARDED_BY(compile_mu_) = -1;
  int stop_guard_fd_ ABSL_GUARDED_BY(compile_mu_) = -1;
  // BeginJobCompiles to the verdict: a job runs, and this many compile tasks ran beside it.
  bool job_compiles_counted_ ABSL_GUARDED_BY(compile_mu_) = false;
  int job_generation_ ABSL_GUARDED_BY(compile_mu_) = 0;  // one per BeginJobCompiles
  std::string job_source_ ABSL_GUARDED_BY(compile_mu_);
  int compiles_beside_job_ ABSL_GUARDED_BY(compile_mu_) = 0;
  // Draining: compiles ahead are answered CANCELLED instead of run.
  bool ahead_stopped_ ABSL_GUARDED_BY(compile_mu_) = false;
  // The running compiles' tokens, so that the daemon's end kills them.
  struct RunningCompile {
    bool ahead;
    std::shared_ptr<CancelToken> cancel;
    std::string source;  // a compile ahead's: the job's own is not counted beside it
    int counted_in = -1;  // the job_generation_ whose count holds it
  };
  std::vector<RunningCompile> compiles_running_ ABSL_GUARDED_BY(compile_mu_);
  std::vector<std::thread> compile_threads_;
  std::atomic<int> compiles_busy_{0};  // tasks queued or running, until their answer is sent
};

}  // namespace pkb

#endif  // PKB_WORKER_DAEMON_WORKER_DAEMON_H_
