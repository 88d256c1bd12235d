#include "server/job_store.h"

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "server/postgres_job_store.h"
#include "server/sqlite_job_store.h"

namespace pkb {

bool IsCacheable(v1::Status status) {
  switch (status) {
    case v1::WORKER_LOST:
    case v1::INTERNAL:
    case v1::CANCELLED:
    case v1::NO_DEVICE:
    case v1::VOIDED:
    case v1::COMPILED:  // a compile task's, never a job's
    case v1::STATUS_UNSPECIFIED:
      return false;
    default:
      return true;
  }
}

bool IsCacheEntry(const v1::Job& job) {
  return job.stage() == v1::DONE && IsCacheable(job.result().status()) &&
         job.cached_from_job_id().empty() && job.confirms_job_id().empty();
}

bool IsPostgresLocation(const std::string& location) {
  return absl::StartsWith(location, "postgresql://") || absl::StartsWith(location, "postgres://");
}

absl::StatusOr<std::unique_ptr<JobStore>> OpenJobStore(const std::string& location) {
  if (IsPostgresLocation(location)) {
    absl::StatusOr<std::unique_ptr<PostgresJobStore>> pg = PostgresJobStore::Open(location);
    if (!pg.ok()) return pg.status();
    return std::unique_ptr<JobStore>(std::move(*pg));
  }
  absl::StatusOr<std::unique_ptr<SqliteJobStore>> lite = SqliteJobStore::Open(location);
  if (!lite.ok()) return lite.status();
  return std::unique_ptr<JobStore>(std::move(*lite));
}

std::string RedactStoreLocation(const std::string& location) {
  if (!IsPostgresLocation(location)) return location;
  std::string out = location;
  // postgresql://user:secret@host/db: the secret sits between the first ':' after the scheme and
  // the '@' that ends the user information.
  size_t start = out.find("://") + 3;
  size_t at = out.find('@', start);
  size_t slash = out.find('/', start);
  if (at != std::string::npos && (slash == std::string::npos || at < slash)) {
    size_t colon = out.find(':', start);
    if (colon != std::string::npos && colon < at) out.replace(colon + 1, at - colon - 1, "***");
  }
  // ...?password=secret&...
  for (size_t p = out.find("password="); p != std::string::npos; p = out.find("password=", p)) {
    p += 9;
    size_t end = out.find('&', p);
    out.replace(p, (end == std::string::npos ? out.size() : end) - p, "***");
  }
  return out;
}

namespace {

// Write() and wait for its commit.
absl::Status WriteAndWait(JobStore& store, JobWrite w) {
  absl::Notification done;
  absl::Status result;
  store.Write(std::move(w), [&](const absl::Status& st) {
    result = st;
    done.Notify();
  });
  done.WaitForNotification();
  return result;
}

}  // namespace

absl::Status JobStore::CreateJob(const v1::Job& job, const v1::EvalEvent* first_event) {
  JobWrite w{job, /*create=*/true, std::nullopt};
  if (first_event) w.event = *first_event;
  return WriteAndWait(*this, std::move(w));
}

absl::Status JobStore::UpdateJob(const v1::Job& job, const v1::EvalEvent* event) {
  JobWrite w{job, /*create=*/false, std::nullopt};
  if (event) w.event = *event;
  return WriteAndWait(*this, std::move(w));
}

int64_t JobStore::AddCommitObserver(std::function<void()> observer) {
  absl::MutexLock lock(&observer_mu_);
  observers_.emplace(++next_observer_id_, std::move(observer));
  return next_observer_id_;
}

void JobStore::RemoveCommitObserver(int64_t id) {
  absl::MutexLock lock(&observer_mu_);
  observers_.erase(id);
}

void JobStore::NotifyCommitObserver() {
  absl::MutexLock lock(&observer_mu_);
  for (auto& [id, observer] : observers_) observer();
}

void GroupCommitJobStore::StartWriter() {
  writer_ = std::thread([this] { WriterLoop(); });
}

void GroupCommitJobStore::StopWriter() {
  {
    absl::MutexLock lock(&queue_mu_);
    stopping_ = true;
  }
  if (writer_.joinable()) writer_.join();  // commits what is still queued first
}

void GroupCommitJobStore::Write(JobWrite write, Committed committed) {
  absl::MutexLock lock(&queue_mu_);
  queue_.push_back(Pending{std::move(write), std::move(committed)});
}

void GroupCommitJobStore::WriterLoop() {
  std::vector<Pending> batch;
  for (;;) {
    {
      absl::MutexLock lock(&queue_mu_, absl::Condition(this, &GroupCommitJobStore::HasWork));
      if (queue_.empty()) return;  // stopping, nothing left
      batch.swap(queue_);
    }
    std::vector<absl::Status> results = CommitBatch(batch);
    for (size_t i = 0; i < batch.size(); ++i) batch[i].committed(results[i]);
    NotifyCommitObserver();
    batch.clear();
  }
}

}  // namespace pkb
