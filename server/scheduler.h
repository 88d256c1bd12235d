// The coordinator's brain: the job queue, leases held by workers, and the fan-out of events to
// watchers. It knows no gRPC: the services (evaluation_service.cc, worker_service.cc) feed it
// calls and hand it small sinks to write to, so it is tested with a fake clock and fake workers.
//
// Life of a job: Submit() writes it QUEUED to the store and queues it; Dispatch matches it to an
// idle worker that can run it (W <= max_world_size, gpu class "any" or equal, same harness) and
// sends a Lease (attempts + 1); the worker's JobEvents move it through COMPILING, VERIFYING and
// BENCHMARKING; a DONE event ends it. A worker that misses its heartbeat deadline loses its lease
// at once; a worker whose stream drops keeps it for one lease timeout (a reconnect that still
// runs the job resumes it). A lost lease puts the job back in the queue, or ends it WORKER_LOST
// once max_attempts leases were lost.
//
// Every change is queued to the JobStore (job record and event in one write) under the mutex, so
// the store sees the writes in the order they were decided; the store group-commits them without
// that mutex. An event reaches watchers only from the store's commit callback, once durable; a
// method that wrote something returns only after its writes are durable and delivered (Submit
// answers with a stored job). Recover() rebuilds the queue and leases after a restart.
//
// Thread-safety: every method is thread-safe (one mutex). Sinks and connections are called with
// that mutex held (sinks on the store's writer thread): they must not block and must not call
// back into the Scheduler.
#ifndef PKB_SERVER_SCHEDULER_H_
#define PKB_SERVER_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "pkb/v1/evaluation.pb.h"
#include "pkb/v1/worker.pb.h"
#include "server/clock.h"
#include "server/job_store.h"
#include "server/problem_catalog.h"

namespace pkb {

struct SchedulerOptions {
  absl::Duration heartbeat_interval = absl::Seconds(2);
  // Silence of a connected worker, or absence of a disconnected one, for this long loses its lease.
  absl::Duration lease_timeout = absl::Seconds(10);
  int max_attempts = 3;                             // leases a job may lose before WORKER_LOST
  absl::Duration job_deadline = absl::Minutes(30);  // the worker kills a run after this
  std::string default_gpu_class = "any";
  std::string harness_version;
};

// Receives one job's events, history first, the last one DONE.
class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void OnEvent(const v1::EvalEvent& event) = 0;
};

// The coordinator's end of one worker stream.
class WorkerConnection {
 public:
  virtual ~WorkerConnection() = default;
  virtual void Send(const v1::CoordinatorMessage& message) = 0;
  // Ends the stream with `status` (the worker then reconnects).
  virtual void Close(const absl::Status& status) = 0;
};

struct SubmitOutcome {
  std::string job_id;
  bool joined = false;  // an identical job was already in flight: this is its id
  bool cached = false;  // answered from the result cache: the job is already DONE
};

struct SchedulerStats {
  int queued = 0;
  int leased = 0;
  int workers = 0;
  int idle_workers = 0;
  int watchers = 0;
};

class Scheduler {
 public:
  // `store`, `clock` and `catalog` must outlive the scheduler.
  Scheduler(JobStore* store, Clock* clock, const ProblemCatalogIndex* catalog,
            SchedulerOptions options);
  ~Scheduler();

  // Loads unfinished jobs from the store: queued ones back in the queue, leased ones waiting one
  // lease timeout for their worker to reconnect. Call once, before serving.
  absl::Status Recover();

  // Validates and queues a job (or joins an identical one in flight, or answers from the cache).
  absl::StatusOr<SubmitOutcome> Submit(v1::SubmitRequest request);
  // Replays the job's events after `after_sequence` to `sink`, then streams live ones until DONE.
  // NOT_FOUND for an unknown job.
  absl::Status Watch(const std::string& job_id, int64_t after_sequence,
                     std::shared_ptr<EventSink> sink);
  void Unwatch(const std::string& job_id, const EventSink* sink);
  absl::StatusOr<v1::Job> Get(const std::string& job_id);
  absl::StatusOr<v1::Job> Cancel(const std::string& job_id, const std::string& reason);

  // Worker streams. `connection_id` names one stream; a worker that reconnects gets a new one.
  // Connect sends the RegisterAck (and perhaps a lease) through `connection`.
  absl::Status Connect(uint64_t connection_id, const v1::Register& reg,
                       std::shared_ptr<WorkerConnection> connection);
  absl::Status OnHeartbeat(uint64_t connection_id, const v1::Heartbeat& heartbeat);
  absl::Status OnJobEvent(uint64_t connection_id, const v1::JobEvent& event);
  absl::Status OnDrain(uint64_t connection_id, const v1::Drain& drain);
  void Disconnect(uint64_t connection_id, const std::string& reason);

  // Expires leases; the server calls it a few times a second, tests after advancing the clock.
  void Tick();

  SchedulerStats Stats();
  const SchedulerOptions& options() const { return options_; }

 private:
  struct Watcher {
    std::shared_ptr<EventSink> sink;
    int64_t last_sent;  // the sequence of the last event it got (replayed or live)
  };
  struct JobState {
    v1::Job job;  // request.source included
    int64_t next_sequence = 1;
    std::vector<Watcher> sinks;
    // DONE is queued but not yet durable: the job stays here (for Watch and dedup) until it is.
    bool finished = false;
    // Set while the lease holder is disconnected: the lease is lost at this time.
    absl::Time orphan_deadline = absl::InfiniteFuture();
  };
  struct WorkerState {
    std::string worker_id;
    v1::WorkerCapabilities caps;
    std::shared_ptr<WorkerConnection> connection;
    absl::Time last_heard;
    bool healthy = true;
    bool draining = false;
    std::string job_id;  // the lease it holds, empty when idle
    int32_t attempt = 0;
  };

  // Queues the job (and an event made of `stage`, `message`) to the store; watchers hear of the
  // event once it is durable (Delivered).
  void Emit(JobState& js, v1::Stage stage, const std::string& message, v1::EvalEvent event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues one store write; `status` (if given) gets its outcome before WaitForWrites returns.
  void Persist(const v1::Job& job, bool create, const v1::EvalEvent* event,
               absl::Status* status = nullptr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The store's callback: the write numbered `ticket` is durable (or failed); fans out its event.
  void Stored(int64_t ticket, const absl::Status& status, const v1::EvalEvent* event)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Deliver(const v1::EvalEvent& event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  class WritingLock;
  absl::Status SubmitLocked(v1::SubmitRequest request, const std::string& key,
                            const v1::ProblemSpec* problem, SubmitOutcome* out,
                            absl::Status* created, absl::Status* updated)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CancelLocked(JobState& js, const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits until every write up to `ticket` is durable and delivered. Call without mu_.
  void WaitForWrites(int64_t ticket) ABSL_LOCKS_EXCLUDED(mu_, stored_mu_);
  // Ends a job: DONE with `result`, out of the queue, the dedup map and memory.
  void Finish(const std::string& job_id, v1::EvalResult result, const std::string& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LoseLease(const std::string& job_id, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Dispatch() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a worker with these capabilities could ever run the job.
  static bool Matches(const v1::WorkerCapabilities& caps, const v1::Job& job);
  bool CanRun(const WorkerState& w, const v1::Job& job) const;
  void DropWorker(uint64_t connection_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t NowMicros() { return absl::ToUnixMicros(clock_->Now()); }
  std::string NewJobId() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  JobStore* const store_;
  Clock* const clock_;
  const ProblemCatalogIndex* const catalog_;
  const SchedulerOptions options_;

  absl::Mutex mu_;
  std::map<std::string, JobState> jobs_ ABSL_GUARDED_BY(mu_);  // unfinished jobs
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);         // QUEUED job ids, oldest first
  std::map<std::string, std::string> inflight_by_key_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, WorkerState> workers_ ABSL_GUARDED_BY(mu_);  // by connection id
  std::map<std::string, uint64_t> connection_of_worker_ ABSL_GUARDED_BY(mu_);
  uint64_t id_counter_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t writes_queued_ ABSL_GUARDED_BY(mu_) = 0;  // tickets of store writes, in queue order

  absl::Mutex stored_mu_ ABSL_ACQUIRED_AFTER(mu_);
  int64_t writes_stored_ ABSL_GUARDED_BY(stored_mu_) = 0;  // every write up to this one is done
  uint64_t id_salt_;
};

}  // namespace pkb

#endif  // PKB_SERVER_SCHEDULER_H_
