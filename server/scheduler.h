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
// that mutex. An event reaches watchers only once durable, delivered once per commit from the
// store's commit observer. Submit, Cancel and Tick return only after their writes are durable and
// delivered (Submit answers with a stored job); SubmitAndWatch and the worker-stream calls do not
// wait (they run on gRPC's threads, and their effects reach everyone through durable events);
// Flush() waits for everything queued so far. Recover() rebuilds the queue and leases after a
// restart.
//
// Confirmation runs (docs/leaderboard.md): when a job that could rank ends OK (not a copy of
// another job's result, not itself a confirmation), Finish first queues a confirmation job of the
// same request (no_cache, the GPU class of the worker that ran it, the same submitter and
// metadata; a ranked one gets its own secret offset from its own id) and then records the
// original's DONE naming it, in that order, so the store never holds an original whose
// confirmation was never created. Recover cancels a confirmation whose original is not DONE (the
// coordinator stopped between the two writes; the original's next DONE queues a new one).
// Dispatch keeps a confirmation off the worker that reported the original while another
// connected worker could run it.
//
// Compile tasks (Evaluation.Check with compile) are not jobs: nothing is stored or queued. A task
// goes at once to a connected, healthy, undrained worker that advertises compile slots and serves
// the spec (harness and gpu class as a job's; any world size), the one with the fewest tasks in
// flight, beside whatever job it runs; or is answered at once when there is none. Its answer comes
// back as a CompileTaskResult; a worker lost (dropped, replaced, silent) answers its tasks
// UNAVAILABLE, and Tick answers DEADLINE_EXCEEDED for one past compile_deadline, so every
// StartCompile is answered exactly once.
//
// Compile ahead (SchedulerOptions.compile_ahead, on by default): a queued job's source is
// compiled while it waits, on a busy worker that could run it (its job running or finishing,
// healthy, undrained, fewer compile tasks in flight than its compile slots): a compile task with no
// caller (`ahead`), for the oldest queued jobs (at most kAheadLookahead looked at per Dispatch),
// each on a worker with the fewest marks. A worker holds at most AheadDepth such jobs (its compile
// slots less one when it has two or more, so one is left for Checks; 1 with 2 slots), and
// has at most that many compiles ahead in flight. The node's compile cache keeps the library (or
// the compile error). Each job is marked as that worker's; when the worker next becomes idle, it
// takes the oldest job it marked and may take first if it is still queued and no older job it
// could run was passed over already: each queued job is passed
// over this way once at most, then it goes first in queue order (a confirmation is never taken by
// the worker it avoids while another could run it). Any other idle worker takes jobs in queue
// order as before, marked or not, and the job then compiles where it runs (a cache hit on the
// same node). A mark is dropped when its job is leased or finished; all of a worker's when it is
// lost, draining or unhealthy. Nothing of it is stored: a coordinator restart forgets it.
//
// Shape runs (docs/leaderboard.md, "Shape runs"): a ranked original that gets a confirmation also
// gets up to two shape runs, queued right after it and before the DONE that names them: the same
// request at (m, n) drawn by DrawRankedShapes, each keyed for its own spec. They are confirmation
// runs (confirms_job_id, recovered and cancelled the same way) marked shape_run, and may run on
// any worker of the class, the original's included.
//
// Dispatch is O(queued jobs it passes over), not O(workers): idle workers are indexed by
// (harness, gpu class) and max world size, and connected capabilities are counted, so neither a
// Submit nor a Dispatch walks the fleet.
//
// Thread-safety: every method is thread-safe (one mutex). Sinks and connections are called with
// that mutex held (sinks on the store's writer thread): they must not block and must not call
// back into the Scheduler.
#ifndef PKB_SERVER_SCHEDULER_H_
#define PKB_SERVER_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
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

class SchedulerObserver;

struct SchedulerOptions {
  absl::Duration heartbeat_interval = absl::Seconds(2);
  // Silence of a connected worker, or absence of a disconnected one, for this long loses its lease.
  absl::Duration lease_timeout = absl::Seconds(10);
  int max_attempts = 3;                             // leases a job may lose before WORKER_LOST
  absl::Duration job_deadline = absl::Minutes(30);  // the worker kills a run after this
  std::string default_gpu_class = "any";
  // The GPU classes a request may name besides "any" (--gpu-classes and the classes the worker
  // tokens grant); empty: any well-formed class name.
  std::set<std::string> gpu_classes;
  // A job that no worker has leased this long after its submission ends CANCELLED, saying why
  // (a class or world size nobody serves must not wait, and be reloaded, forever).
  absl::Duration queue_deadline = absl::Hours(24);
  std::string harness_version;
  // The input seed offset of ranked submissions (pkb-eval --set-offset); 0: ranked submissions are
  // refused (FAILED_PRECONDITION). Never logged or shown.
  int64_t secret_set_offset = 0;          // ranked jobs run on JobSetOffset(this, job id)
  SchedulerObserver* observer = nullptr;  // metrics; must outlive the scheduler
  // A compile task not answered within this is answered DEADLINE_EXCEEDED (the worker is told
  // the same limit and kills its compile).
  absl::Duration compile_deadline = absl::Seconds(120);
  // Tasks in flight per compile slot of a worker (the rest wait on the worker); past it for every
  // worker that could compile, StartCompile answers UNAVAILABLE (busy).
  int compile_tasks_per_slot = 4;
  // Compile queued jobs ahead on busy workers that could run them (above). The compiles are
  // stopped before a job's timing, and a job with any beside it keeps its reference out of the
  // node's baseline (docs/service.md, "Compile ahead").
  bool compile_ahead = true;
};

// Receives one job's events, history first, the last one DONE.
class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void OnEvent(const v1::EvalEvent& event) = 0;
  // The job could not be stored (its submission is lost to the store): no event will follow.
  virtual void OnError(const absl::Status& status) {}
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
  bool joined = false;  // an identical job of the same submitter was in flight: this is its id
  // An identical job of another submitter was in flight: this is a job of the caller's own that
  // shares its evaluation (events mirrored, result copied; Job.cached_from_job_id names it).
  bool follows = false;
  bool cached = false;  // answered from the result cache: the job is already DONE
};

// What the scheduler reports to its metrics (server/coordinator_metrics.h). Called with the
// scheduler's lock held: implementations must be quick and must not call the scheduler.
class SchedulerObserver {
 public:
  virtual ~SchedulerObserver() = default;
  // "new", "joined", "cached" or "confirmation" (queued by the coordinator, not submitted)
  virtual void JobSubmitted(const char* outcome) {}
  // A job reached DONE (`job` carries its result; `cached` for an answer from the cache).
  virtual void JobFinished(const v1::Job& job, bool cached, absl::Time now) {}
  virtual void LeaseLost() {}
};

struct SchedulerStats {
  int queued = 0;
  int leased = 0;
  int workers = 0;
  int idle_workers = 0;
  int watchers = 0;
  int unhealthy_workers = 0;
};

// The answer to one compile task: OK with the worker's result (status COMPILED, COMPILE_ERROR,
// REJECTED, or the worker's TIMEOUT / INTERNAL), or why nothing was compiled: UNAVAILABLE (no
// connected worker compiles the spec, all are busy, or the worker was lost) or DEADLINE_EXCEEDED.
struct CompileAnswer {
  absl::Status status;
  v1::EvalResult result;
  std::string worker_id;  // the worker it was sent to, if any
};
// Called exactly once per task, with the scheduler's mutex held: it must not block and must not
// call back into the Scheduler.
using CompileDone = std::function<void(CompileAnswer)>;

// The input-set offset of one ranked job: derived from the coordinator's secret and the job id,
// so every job's secret inputs differ and none can be predicted from another.
int64_t JobSetOffset(int64_t secret, const std::string& job_id);

// The shapes of a ranked job's shape runs: up to `count` points of `range` (its problem's
// WorldLayout.ranked_shapes at its W), distinct from (own_m, own_n), the job's own shape, and from
// each other, drawn from the secret and the job id like JobSetOffset: a submitter cannot know them
// before the job exists. Fewer where the range has fewer other points; none where it is unset.
std::vector<std::pair<int64_t, int64_t>> DrawRankedShapes(int64_t secret, const std::string& job_id,
                                                          const v1::ShapeRange& range,
                                                          int64_t own_m, int64_t own_n, int count);

class Scheduler {
 public:
  // Shape runs a ranked result gets (fewer where its range has fewer other shapes).
  static constexpr int kShapeRuns = 2;
  // Queued jobs a Dispatch looks at for a compile ahead, oldest first.
  static constexpr int kAheadLookahead = 64;

  // `store`, `clock` and `catalog` must outlive the scheduler.
  Scheduler(JobStore* store, Clock* clock, const ProblemCatalogIndex* catalog,
            SchedulerOptions options);
  ~Scheduler();

  // Loads unfinished jobs from the store: queued ones back in the queue, leased ones waiting one
  // lease timeout for their worker to reconnect. Call once, before serving.
  absl::Status Recover();

  // Validates and queues a job (or joins an identical one in flight, or answers from the cache).
  absl::StatusOr<SubmitOutcome> Submit(v1::SubmitRequest request);
  // Submit, and subscribe `sink` to the job's events from its first, without waiting for the
  // store: QUEUED reaches the sink once the job is durable (or OnError if it cannot be stored).
  absl::StatusOr<SubmitOutcome> SubmitAndWatch(v1::SubmitRequest request,
                                               std::shared_ptr<EventSink> sink);
  // Replays the job's events after `after_sequence` to `sink`, then streams live ones until DONE.
  // NOT_FOUND for an unknown job.
  absl::Status Watch(const std::string& job_id, int64_t after_sequence,
                     std::shared_ptr<EventSink> sink);
  void Unwatch(const std::string& job_id, const EventSink* sink);
  absl::StatusOr<v1::Job> Get(const std::string& job_id);
  absl::StatusOr<v1::Job> Cancel(const std::string& job_id, const std::string& reason);
  // Voids every finished result `worker_id` reported (see pkb.v1.Admin.VoidWorker); the ids of
  // the jobs voided now.
  absl::StatusOr<std::vector<std::string>> VoidWorker(const std::string& worker_id,
                                                      const std::string& reason);

  // Worker streams. `connection_id` names one stream; a worker that reconnects gets a new one.
  // Connect sends the RegisterAck (and perhaps a lease) through `connection`.
  absl::Status Connect(uint64_t connection_id, const v1::Register& reg,
                       std::shared_ptr<WorkerConnection> connection);
  absl::Status OnHeartbeat(uint64_t connection_id, const v1::Heartbeat& heartbeat);
  absl::Status OnJobEvent(uint64_t connection_id, const v1::JobEvent& event);
  absl::Status OnDrain(uint64_t connection_id, const v1::Drain& drain);
  void Disconnect(uint64_t connection_id, const std::string& reason);

  // Compiles `source` as `spec` (completed, as a lease's) on a worker; `done` gets the answer,
  // perhaps before this returns.
  void StartCompile(const v1::EvalSpec& spec, const std::string& source, CompileDone done);
  absl::Status OnCompileResult(uint64_t connection_id, const v1::CompileTaskResult& result);
  // Answers every task in flight UNAVAILABLE with `reason` (the coordinator is shutting down).
  void AbandonCompiles(const std::string& reason);

  // Expires leases and compile tasks; the server calls it a few times a second, tests after
  // advancing the clock.
  void Tick();
  // Waits until every write queued so far is durable and its event delivered.
  void Flush() ABSL_LOCKS_EXCLUDED(mu_);

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
    // Dedup across submitters: a follower is never queued; it mirrors its leader's stage events
    // and gets a copy of its result. The leader lists its followers.
    std::string leader;
    std::vector<std::string> followers;
    // A confirmation run: the worker that reported its original, avoided while another can run it.
    std::string avoid_worker;
    // Queued, its source compiled ahead on this connection's worker (0: none).
    uint64_t ahead_conn = 0;
    // A worker took a newer job it had compiled ahead while this one, which it could run, waited:
    // never again (LeaseAheadJobs).
    bool passed_over = false;
  };
  struct WorkerState {
    std::string worker_id;
    v1::WorkerCapabilities caps;
    std::shared_ptr<WorkerConnection> connection;
    absl::Time last_heard;
    bool healthy = true;
    bool draining = false;
    bool finishing = false;  // its last job's DONE is in, its engine or health check not yet done
    std::string job_id;      // the lease it holds, empty when idle
    int32_t attempt = 0;
    bool indexed = false;  // in idle_ (healthy, not draining, not finishing, no lease)
    int compiles = 0;      // compile tasks sent and not answered
    // The queued jobs whose sources it compiles (or compiled) ahead, at most AheadDepth; the oldest
    // in the queue is its first pick.
    std::vector<std::string> ahead_jobs;
    int ahead_level = -1;        // the level of ahead_free_ it is in (its marks then), -1: none
    int ahead_compiles = 0;      // compile tasks ahead sent and not answered
  };
  struct CompileTaskState {
    uint64_t connection_id;
    std::string worker_id;
    absl::Time deadline;
    bool ahead;  // a compile ahead of a queued job
    CompileDone done;
  };
  // Workers that can serve the same jobs: (harness version, gpu class).
  using CapsKey = std::pair<std::string, std::string>;
  // Workers by what they serve, then by (max world size, connection id).
  using WorkerIndex = std::map<CapsKey, std::set<std::pair<int32_t, uint64_t>>>;
  static CapsKey KeyOf(const v1::WorkerCapabilities& caps) {
    return {caps.harness_version(), caps.gpu_class()};
  }
  // A store write whose transaction committed (or failed), waiting for the commit observer.
  struct StoredWrite {
    int64_t ticket;
    absl::Status status;
    bool create;
    std::string job_id;
    std::shared_ptr<const v1::EvalEvent> event;
  };

  // Queues the job (and an event made of `stage`, `message`) to the store; watchers hear of the
  // event once it is durable (Delivered).
  void Emit(JobState& js, v1::Stage stage, const std::string& message, v1::EvalEvent event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues one store write; `status` (if given) gets its outcome before WaitForWrites returns.
  void Persist(const v1::Job& job, bool create, const v1::EvalEvent* event,
               absl::Status* status = nullptr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The store's commit observer: the writes of one transaction are durable (or failed); fans out
  // their events and wakes the callers waiting for them, once per commit.
  void Committed() ABSL_LOCKS_EXCLUDED(mu_);
  // A job whose creation could not be stored: out of memory, its watchers told.
  void DropUnstoredJob(const std::string& job_id, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Deliver(const v1::EvalEvent& event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Holds mu_ for one call; on the way out, releases it and waits until the store writes the call
  // queued are durable and delivered, so a caller (and a test) sees the call's effects.
  class ABSL_SCOPED_LOCKABLE WritingLock {
   public:
    explicit WritingLock(Scheduler* s) ABSL_EXCLUSIVE_LOCK_FUNCTION(s->mu_) : s_(s) {
      s_->mu_.Lock();
      start_ = s_->writes_queued_;
    }
    ~WritingLock() ABSL_UNLOCK_FUNCTION() {
      int64_t end = s_->writes_queued_;
      s_->mu_.Unlock();
      if (end > start_) s_->WaitForWrites(end);
    }

   private:
    Scheduler* const s_;
    int64_t start_;
  };
  // Validation and the job key, outside the mutex.
  absl::StatusOr<std::pair<std::string, const v1::ProblemSpec*>> Prepare(
      v1::SubmitRequest& request);
  absl::Status SubmitLocked(v1::SubmitRequest request, const std::string& key,
                            const v1::ProblemSpec* problem, SubmitOutcome* out,
                            absl::Status* created, absl::Status* updated)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WatchLocked(const std::string& job_id, int64_t after_sequence,
                           std::shared_ptr<EventSink> sink) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CancelLocked(JobState& js, const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A new job record, QUEUED, and its first event (sequence 1) in `queued`.
  v1::Job NewQueuedJob(v1::SubmitRequest request, const std::string& key, int32_t problem_version,
                       v1::EvalEvent* queued) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `job`, finishing with its result, gets a confirmation run.
  static bool NeedsConfirmation(const v1::Job& job);
  // Creates, stores and queues the confirmation job of `original` (DONE OK, not yet emitted), and
  // names it in the original's record and result.
  void QueueConfirmation(JobState& original) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A ranked `original` that gets a confirmation: creates, stores and queues its shape runs
  // (kShapeRuns shapes drawn from its problem's ranked range at its W, DrawRankedShapes), names
  // them in the original's record and result, and returns what its DONE message says of them.
  std::string QueueShapeRuns(JobState& original) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A new job of this request that shares the evaluation of `leader` (in flight).
  void FollowLocked(v1::SubmitRequest request, const std::string& key,
                    const v1::ProblemSpec* problem, JobState& leader, SubmitOutcome* out,
                    absl::Status* created) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The leader is cancelled by its submitter: its first follower becomes a job in the queue of
  // its own, and the others follow that one.
  void PromoteFollowers(JobState& leader) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends a follower with a copy of its finished leader's result.
  void FinishFollower(JobState& follower, const v1::Job& leader, const std::string& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the job's queued wait with CANCELLED when nobody leased it within queue_deadline.
  void ExpireQueued(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
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
  // Whether any connected worker could ever run the job (from the capability counts).
  bool AnyConnectedCanRun(const v1::Job& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A worker of `index` that can run the job, the one with the smallest sufficient max world size
  // (for a confirmation, not the worker it avoids while another connected one could run it).
  std::optional<uint64_t> Pick(const WorkerIndex& index, const JobState& js) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the worker may take the job now: it matches, and a confirmation's avoided worker only
  // where no other connected one could run it.
  bool CanTake(const WorkerState& w, const JobState& js) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Leases the queued job (already out of queue_) to the idle worker of `connection_id`.
  void LeaseTo(JobState& js, uint64_t connection_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Workers just idle with a job compiled ahead take it, if it is still queued.
  void LeaseAheadJobs() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends compile tasks ahead for the oldest queued jobs without one, to free busy workers.
  void CompileAhead() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the job's compile-ahead mark and its worker's.
  void ClearAhead(JobState& js) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops every compile-ahead mark the worker holds, and its jobs'.
  void DropAheadMarks(uint64_t connection_id, WorkerState& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // How many queued jobs a busy worker compiles ahead at once: one compile slot is left for
  // Checks when it has two or more.
  static int AheadDepth(const v1::WorkerCapabilities& caps);
  // Sends one compile task to the worker of `connection_id` (its count goes up); its id.
  std::string SendCompile(uint64_t connection_id, WorkerState& w, const v1::EvalSpec& spec,
                          const std::string& source, bool ahead, CompileDone done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether connected workers other than `worker_id` could run the job (from the counts).
  bool AnotherConnectedCanRun(const v1::Job& job, const std::string& worker_id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Puts the worker in or out of idle_ and ahead_free_ after a change of its health, drain, lease,
  // compile tasks or compile-ahead mark.
  void Reindex(uint64_t connection_id, WorkerState& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropWorker(uint64_t connection_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends a compile task in flight with `answer` (its worker's count goes down).
  void AnswerCompile(std::map<std::string, CompileTaskState>::iterator task, CompileAnswer answer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
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
  WorkerIndex idle_ ABSL_GUARDED_BY(mu_);  // idle workers
  // Busy workers (a lease or finishing) that take a compile ahead (healthy, undrained, fewer
  // marks and compiles ahead than AheadDepth, a compile slot free), by how many marks they hold:
  // a job goes to a worker with the fewest, so that marks spread over the workers that could
  // run them rather than pile on the first.
  std::vector<WorkerIndex> ahead_free_ ABSL_GUARDED_BY(mu_);
  int ahead_free_count_ ABSL_GUARDED_BY(mu_) = 0;
  // Workers that became idle holding a mark, for the next Dispatch (LeaseAheadJobs).
  std::vector<uint64_t> ahead_ready_ ABSL_GUARDED_BY(mu_);
  // A worker joined ahead_free_ or a mark was dropped since the last CompileAhead.
  bool ahead_dirty_ ABSL_GUARDED_BY(mu_) = false;
  int idle_count_ ABSL_GUARDED_BY(mu_) = 0;
  // (max world size, max functional world size) of every connected worker, by what they serve.
  std::map<CapsKey, std::multiset<std::pair<int32_t, int32_t>>> connected_ ABSL_GUARDED_BY(mu_);
  uint64_t id_counter_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, CompileTaskState> compile_tasks_ ABSL_GUARDED_BY(mu_);  // by task id
  uint64_t compile_counter_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t writes_queued_ ABSL_GUARDED_BY(mu_) = 0;  // tickets of store writes, in queue order

  // Filled by the store's write callbacks, emptied by its commit observer (one writer thread).
  absl::Mutex committed_mu_;
  std::vector<StoredWrite> committed_ ABSL_GUARDED_BY(committed_mu_);

  absl::Mutex stored_mu_ ABSL_ACQUIRED_AFTER(mu_);
  int64_t writes_stored_ ABSL_GUARDED_BY(stored_mu_) = 0;  // every write up to this one is done
  uint64_t id_salt_;
  int64_t commit_observer_ = 0;  // our id in the store's observer list
};

}  // namespace pkb

#endif  // PKB_SERVER_SCHEDULER_H_
