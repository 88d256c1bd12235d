// Where the coordinator keeps jobs and their events, so a restart loses nothing.
//
// The store is the source of truth: the scheduler writes every change of a job (and the event
// that announces it) in one Write before anyone is told, and rebuilds its queue and leases from
// ListUnfinishedJobs() at startup. Implementations must be thread-safe.
//
// Writes are group-committed: Write() queues and returns at once; many queued writes share one
// transaction, and each write's callback runs once its transaction is durable (or failed), in the
// order the writes were queued. Readers see only committed writes.
//
// Two implementations, one contract (server/job_store_test.cc runs the same cases on both):
// SqliteJobStore, the embedded default, and PostgresJobStore, for a coordinator that must move
// between hosts. OpenJobStore picks one from a location string. Both version their schema the
// same way: a schema_migrations (version, applied_at) table, numbered migration steps applied at
// open in one transaction each, and a refusal (FAILED_PRECONDITION) to open a store whose version
// is newer than the binary knows, so an old coordinator never writes rows it does not understand.
#ifndef PKB_SERVER_JOB_STORE_H_
#define PKB_SERVER_JOB_STORE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "pkb/v1/evaluation.pb.h"
#include "pkb/v1/result.pb.h"

namespace pkb {

// One atomic change: the job record (inserted when `create`, else replaced) and perhaps one event.
struct JobWrite {
  v1::Job job;  // request.source is stored (apart) only when `create`
  bool create = false;
  std::optional<v1::EvalEvent> event;
};

// Which jobs ListJobs returns. Zero values mean "no restriction"; every field set must match.
struct JobQuery {
  int32_t problem_id = 0;
  int32_t world_size = 0;
  std::string gpu_class;  // Job.gpu_class, or request.gpu_class where the job was never leased
  std::string dtype;
  std::string submitter;
  std::string model;
  std::string agent;
  std::string tag;  // one of request.tags
  std::string source_sha256;
  std::optional<bool> ranked;         // request.ranked
  bool done_only = false;             // stage DONE
  std::vector<v1::Status> statuses;   // result.status one of these (implies done_only)
  bool exclude_cache_copies = false;  // leave out jobs with cached_from_job_id
  // true: confirmation runs only (Job.confirms_job_id set); false: none of them.
  std::optional<bool> confirmations;
  // A time window [from, to) in microseconds since the epoch, on the finish time (updated time of
  // a DONE job; unfinished jobs never match) or, with `by_created`, on the creation time.
  int64_t from_micros = 0;
  int64_t to_micros = 0;
  bool by_created = false;
  bool newest_first = false;  // by the same time; default oldest first
  int32_t limit = 0;
};

class JobStore {
 public:
  using Committed = std::function<void(const absl::Status&)>;
  virtual ~JobStore() = default;

  // Queues `write`; `committed` runs on the store's writer thread once the write is durable (OK),
  // or failed (then nothing of it was stored), in queue order. `committed` must not wait for
  // another write. ALREADY_EXISTS for a create whose id is taken; NOT_FOUND for an unknown update.
  virtual void Write(JobWrite write, Committed committed) = 0;

  // Write() and wait for it: inserts a new job (job.request.source is stored apart and left out
  // of the job record) and, if given, its first event. ALREADY_EXISTS if the id is taken.
  absl::Status CreateJob(const v1::Job& job, const v1::EvalEvent* first_event);
  // Write() and wait for it: replaces the job record and, if given, appends one event.
  absl::Status UpdateJob(const v1::Job& job, const v1::EvalEvent* event);
  // The job without its source. NOT_FOUND if unknown.
  virtual absl::StatusOr<v1::Job> GetJob(const std::string& job_id) = 0;
  virtual absl::StatusOr<std::string> GetSource(const std::string& job_id) = 0;
  // Events with sequence > after_sequence, in order.
  virtual absl::StatusOr<std::vector<v1::EvalEvent>> ListEvents(const std::string& job_id,
                                                                int64_t after_sequence) = 0;
  // Jobs not DONE, oldest first.
  virtual absl::StatusOr<std::vector<v1::Job>> ListUnfinishedJobs() = 0;
  // The newest DONE job with this key whose result may be reused (see IsCacheable).
  virtual absl::StatusOr<std::optional<v1::Job>> FindCachedJob(const std::string& job_key) = 0;
  // Jobs matching `query` (the leaderboard and submission listings), without their sources.
  virtual absl::StatusOr<std::vector<v1::Job>> ListJobs(const JobQuery& query) = 0;

  // `observer` runs on the writer thread once after the callbacks of each transaction, so that a
  // user can batch its own work per commit (the scheduler delivers events and wakes waiters once
  // per commit, not once per write). Returns an id for RemoveCommitObserver; several observers may
  // be registered (a restarted scheduler is built before the old one is destroyed).
  int64_t AddCommitObserver(std::function<void()> observer);
  void RemoveCommitObserver(int64_t id);

 protected:
  // Implementations call this after running the callbacks of one transaction.
  void NotifyCommitObserver();

 private:
  absl::Mutex observer_mu_;
  int64_t next_observer_id_ ABSL_GUARDED_BY(observer_mu_) = 0;
  std::map<int64_t, std::function<void()>> observers_ ABSL_GUARDED_BY(observer_mu_);
};

// The group-commit queue both stores share: Write() queues, one writer thread takes everything
// queued since its last commit, hands it to CommitBatch (one transaction), runs the callbacks in
// order and notifies the commit observers. A subclass calls StartWriter() once it is fully built
// and StopWriter() first thing in its destructor (the writer calls CommitBatch, which must not run
// on a half-destroyed store); StopWriter commits what is still queued before it returns.
class GroupCommitJobStore : public JobStore {
 public:
  void Write(JobWrite write, Committed committed) final;

 protected:
  struct Pending {
    JobWrite write;
    Committed committed;
  };
  // Commits `batch` in one transaction; the status of each write, in order. Runs on the writer
  // thread only.
  virtual std::vector<absl::Status> CommitBatch(const std::vector<Pending>& batch) = 0;
  void StartWriter();
  void StopWriter();

 private:
  void WriterLoop();
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_) {
    return !queue_.empty() || stopping_;
  }

  absl::Mutex queue_mu_;
  std::vector<Pending> queue_ ABSL_GUARDED_BY(queue_mu_);
  bool stopping_ ABSL_GUARDED_BY(queue_mu_) = false;
  std::thread writer_;
};

// A result may be served again for the same job key unless the service, not the submission,
// caused it (WORKER_LOST, INTERNAL), it was cut short (CANCELLED) or no GPU ran it (NO_DEVICE).
bool IsCacheable(v1::Status status);
// Whether the store keeps `job` as a cache entry for its key: DONE, a cacheable status, and an
// original (not a copy, not a confirmation run, which answers its original's question, not the
// submitter's).
bool IsCacheEntry(const v1::Job& job);

// A store at `location`: a "postgresql://" (or "postgres://") URI opens PostgresJobStore; anything
// else is a SQLite file path (":memory:" for a throwaway one).
absl::StatusOr<std::unique_ptr<JobStore>> OpenJobStore(const std::string& location);
bool IsPostgresLocation(const std::string& location);
// `location` with any password in it replaced by "***", for logs.
std::string RedactStoreLocation(const std::string& location);

}  // namespace pkb

#endif  // PKB_SERVER_JOB_STORE_H_
