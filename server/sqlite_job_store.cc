#include "server/sqlite_job_store.h"

#include <sqlite3.h>

#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/status_macros.h"

namespace pkb {

bool IsCacheable(v1::Status status) {
  switch (status) {
    case v1::WORKER_LOST:
    case v1::INTERNAL:
    case v1::CANCELLED:
    case v1::NO_DEVICE:
    case v1::STATUS_UNSPECIFIED:
      return false;
    default:
      return true;
  }
}

namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS jobs (
  id TEXT PRIMARY KEY,
  job_key TEXT NOT NULL,
  done INTEGER NOT NULL,
  status INTEGER NOT NULL,
  cacheable INTEGER NOT NULL,
  problem_id INTEGER NOT NULL,
  created INTEGER NOT NULL,
  updated INTEGER NOT NULL,
  record BLOB NOT NULL,
  source BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_by_key ON jobs(job_key, done, cacheable, updated);
CREATE INDEX IF NOT EXISTS jobs_unfinished ON jobs(done, created);
CREATE TABLE IF NOT EXISTS events (
  job_id TEXT NOT NULL,
  seq INTEGER NOT NULL,
  event BLOB NOT NULL,
  PRIMARY KEY (job_id, seq)
) WITHOUT ROWID;
)sql";

// One use of a prepared statement from the store's cache; reset (kept prepared) on scope exit.
class Stmt {
 public:
  Stmt(sqlite3* db, std::map<std::string, sqlite3_stmt*>* cache, const std::string& sql) : db_(db) {
    auto it = cache->find(sql);
    if (it != cache->end()) {
      stmt_ = it->second;
      rc_ = SQLITE_OK;
      return;
    }
    rc_ = sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt_, nullptr);
    if (rc_ == SQLITE_OK) cache->emplace(sql, stmt_);
  }
  ~Stmt() {
    if (rc_ == SQLITE_OK) {
      sqlite3_reset(stmt_);
      sqlite3_clear_bindings(stmt_);
    }
  }
  absl::Status status() const {
    return rc_ == SQLITE_OK
               ? absl::OkStatus()
               : absl::InternalError(absl::StrCat("sqlite prepare: ", sqlite3_errmsg(db_)));
  }
  void Bind(int i, const std::string& s) {
    sqlite3_bind_text(stmt_, i, s.data(), s.size(), SQLITE_TRANSIENT);
  }
  void BindBlob(int i, const std::string& s) {
    sqlite3_bind_blob(stmt_, i, s.data(), s.size(), SQLITE_TRANSIENT);
  }
  void Bind(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  // SQLITE_ROW, SQLITE_DONE or an error code.
  int Step() { return sqlite3_step(stmt_); }
  std::string Blob(int col) {
    const void* p = sqlite3_column_blob(stmt_, col);
    return std::string(static_cast<const char*>(p), sqlite3_column_bytes(stmt_, col));
  }
  int64_t Int(int col) { return sqlite3_column_int64(stmt_, col); }
  absl::Status Error(const char* what) const {
    int code = sqlite3_extended_errcode(db_);
    std::string msg = absl::StrCat("sqlite ", what, ": ", sqlite3_errmsg(db_));
    if ((code & 0xff) == SQLITE_CONSTRAINT) return absl::AlreadyExistsError(msg);
    return absl::InternalError(msg);
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  int rc_;
};

using StmtCache = std::map<std::string, sqlite3_stmt*>;

absl::Status Step(sqlite3* db, StmtCache* cache, const char* sql) {
  Stmt s(db, cache, sql);
  PKB_RETURN_IF_ERROR(s.status());
  if (s.Step() != SQLITE_DONE) return s.Error(sql);
  return absl::OkStatus();
}

absl::Status Exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return absl::InternalError(absl::StrCat("sqlite: ", msg, " in: ", sql));
  }
  return absl::OkStatus();
}

absl::Status WriteJob(sqlite3* db, StmtCache* cache, const v1::Job& job, bool insert) {
  const std::string& source = job.request().source();
  std::string record;
  if (source.empty()) {
    record = job.SerializeAsString();
  } else {
    v1::Job copy = job;
    copy.mutable_request()->clear_source();
    record = copy.SerializeAsString();
  }
  bool done = job.stage() == v1::DONE;
  v1::Status status = job.result().status();
  Stmt s(
      db, cache,
      insert
          ? "INSERT INTO jobs(id, job_key, done, status, cacheable, problem_id, created, updated, "
            "record, source) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
          : "UPDATE jobs SET job_key=?2, done=?3, status=?4, cacheable=?5, problem_id=?6, "
            "created=?7, updated=?8, record=?9 WHERE id=?1");
  PKB_RETURN_IF_ERROR(s.status());
  s.Bind(1, job.job_id());
  s.Bind(2, job.job_key());
  s.Bind(3, int64_t{done});
  s.Bind(4, int64_t{status});
  s.Bind(5, int64_t{done && IsCacheable(status) && job.cached_from_job_id().empty()});
  s.Bind(6, int64_t{job.request().problem_id()});
  s.Bind(7, job.created_unix_micros());
  s.Bind(8, job.updated_unix_micros());
  s.BindBlob(9, record);
  if (insert) s.BindBlob(10, source);
  if (s.Step() != SQLITE_DONE) return s.Error(insert ? "insert job" : "update job");
  if (!insert && sqlite3_changes(db) != 1)
    return absl::NotFoundError(absl::StrCat("no job ", job.job_id()));
  return absl::OkStatus();
}

absl::Status WriteEvent(sqlite3* db, StmtCache* cache, const v1::EvalEvent& event) {
  Stmt s(db, cache, "INSERT INTO events(job_id, seq, event) VALUES(?1, ?2, ?3)");
  PKB_RETURN_IF_ERROR(s.status());
  s.Bind(1, event.job_id());
  s.Bind(2, event.sequence());
  s.BindBlob(3, event.SerializeAsString());
  if (s.Step() != SQLITE_DONE) return s.Error("insert event");
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::Job>> QueryJobs(sqlite3* db, StmtCache* cache,
                                               const std::string& sql, const std::string& arg) {
  Stmt s(db, cache, sql);
  PKB_RETURN_IF_ERROR(s.status());
  if (!arg.empty()) s.Bind(1, arg);
  std::vector<v1::Job> jobs;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) {
    v1::Job job;
    if (!job.ParseFromString(s.Blob(0)))
      return absl::DataLossError("corrupt job record in the store");
    jobs.push_back(std::move(job));
  }
  if (rc != SQLITE_DONE) return s.Error("query jobs");
  return jobs;
}

absl::StatusOr<sqlite3*> OpenConnection(const std::string& path) {
  sqlite3* db = nullptr;
  int rc =
      sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return absl::UnavailableError(absl::StrCat("cannot open job store ", path, ": ", msg));
  }
  sqlite3_busy_timeout(db, 5000);
  return db;
}

}  // namespace

absl::Status JobStore::CreateJob(const v1::Job& job, const v1::EvalEvent* first_event) {
  JobWrite w{job, /*create=*/true, std::nullopt};
  if (first_event) w.event = *first_event;
  absl::Notification done;
  absl::Status result;
  Write(std::move(w), [&](const absl::Status& st) {
    result = st;
    done.Notify();
  });
  done.WaitForNotification();
  return result;
}

absl::Status JobStore::UpdateJob(const v1::Job& job, const v1::EvalEvent* event) {
  JobWrite w{job, /*create=*/false, std::nullopt};
  if (event) w.event = *event;
  absl::Notification done;
  absl::Status result;
  Write(std::move(w), [&](const absl::Status& st) {
    result = st;
    done.Notify();
  });
  done.WaitForNotification();
  return result;
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

absl::StatusOr<std::unique_ptr<SqliteJobStore>> SqliteJobStore::Open(const std::string& path) {
  PKB_ASSIGN_OR_RETURN(sqlite3 * write_db, OpenConnection(path));
  absl::Status st = Exec(write_db, "PRAGMA journal_mode=WAL");
  if (st.ok()) st = Exec(write_db, "PRAGMA synchronous=NORMAL");
  if (st.ok()) st = Exec(write_db, kSchema);
  if (!st.ok()) {
    sqlite3_close(write_db);
    return st;
  }
  sqlite3* read_db = write_db;
  if (!path.empty() && path != ":memory:") {
    absl::StatusOr<sqlite3*> r = OpenConnection(path);
    if (!r.ok()) {
      sqlite3_close(write_db);
      return r.status();
    }
    read_db = *r;
  }
  return std::unique_ptr<SqliteJobStore>(new SqliteJobStore(write_db, read_db));
}

SqliteJobStore::SqliteJobStore(sqlite3* write_db, sqlite3* read_db)
    : write_db_(write_db), read_db_(read_db) {
  writer_ = std::thread([this] { WriterLoop(); });
}

SqliteJobStore::~SqliteJobStore() {
  {
    absl::MutexLock lock(&queue_mu_);
    stopping_ = true;
  }
  writer_.join();  // commits what is still queued first
  absl::MutexLock wl(&write_mu_);
  absl::MutexLock rl(&read_mu_);
  for (auto& [sql, stmt] : write_stmts_) sqlite3_finalize(stmt);
  if (read_db_ != write_db_) {
    for (auto& [sql, stmt] : read_stmts_) sqlite3_finalize(stmt);
    sqlite3_close(read_db_);
  }
  sqlite3_close(write_db_);
}

void SqliteJobStore::Write(JobWrite write, Committed committed) {
  absl::MutexLock lock(&queue_mu_);
  queue_.push_back(Pending{std::move(write), std::move(committed)});
}

void SqliteJobStore::WriterLoop() {
  std::vector<Pending> batch;
  for (;;) {
    {
      absl::MutexLock lock(&queue_mu_, absl::Condition(this, &SqliteJobStore::HasWork));
      if (queue_.empty()) return;  // stopping, nothing left
      batch.swap(queue_);
    }
    std::vector<absl::Status> results = CommitBatch(batch);
    for (size_t i = 0; i < batch.size(); ++i) batch[i].committed(results[i]);
    NotifyCommitObserver();
    batch.clear();
  }
}

std::vector<absl::Status> SqliteJobStore::CommitBatch(const std::vector<Pending>& batch) {
  absl::MutexLock wl(&write_mu_);
  std::optional<absl::MutexLock> rl;
  if (read_db_ == write_db_) rl.emplace(&read_mu_);
  sqlite3* db = write_db_;
  StmtCache* cache = &write_stmts_;
  std::vector<absl::Status> results(batch.size());
  absl::Status begin = Step(db, cache, "BEGIN IMMEDIATE");
  if (!begin.ok()) {
    for (auto& r : results) r = begin;
    return results;
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    const JobWrite& w = batch[i].write;
    absl::Status st = Step(db, cache, "SAVEPOINT w");
    if (!st.ok()) {
      results[i] = st;
      continue;
    }
    st = WriteJob(db, cache, w.job, w.create);
    if (st.ok() && w.event) st = WriteEvent(db, cache, *w.event);
    if (!st.ok()) Step(db, cache, "ROLLBACK TO w").IgnoreError();
    Step(db, cache, "RELEASE w").IgnoreError();
    results[i] = st;
  }
  absl::Status commit = Step(db, cache, "COMMIT");
  if (!commit.ok()) {
    Step(db, cache, "ROLLBACK").IgnoreError();
    for (auto& r : results) r = commit;
  }
  return results;
}

absl::StatusOr<v1::Job> SqliteJobStore::GetJob(const std::string& job_id) {
  absl::MutexLock lock(&read_mu_);
  PKB_ASSIGN_OR_RETURN(
      auto jobs, QueryJobs(read_db_, &read_stmts_, "SELECT record FROM jobs WHERE id=?1", job_id));
  if (jobs.empty()) return absl::NotFoundError(absl::StrCat("no job ", job_id));
  return std::move(jobs.front());
}

absl::StatusOr<std::string> SqliteJobStore::GetSource(const std::string& job_id) {
  absl::MutexLock lock(&read_mu_);
  Stmt s(read_db_, &read_stmts_, "SELECT source FROM jobs WHERE id=?1");
  PKB_RETURN_IF_ERROR(s.status());
  s.Bind(1, job_id);
  int rc = s.Step();
  if (rc == SQLITE_ROW) return s.Blob(0);
  if (rc == SQLITE_DONE) return absl::NotFoundError(absl::StrCat("no job ", job_id));
  return s.Error("get source");
}

absl::StatusOr<std::vector<v1::EvalEvent>> SqliteJobStore::ListEvents(const std::string& job_id,
                                                                      int64_t after_sequence) {
  absl::MutexLock lock(&read_mu_);
  Stmt s(read_db_, &read_stmts_,
         "SELECT event FROM events WHERE job_id=?1 AND seq>?2 ORDER BY seq");
  PKB_RETURN_IF_ERROR(s.status());
  s.Bind(1, job_id);
  s.Bind(2, after_sequence);
  std::vector<v1::EvalEvent> events;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) {
    v1::EvalEvent e;
    if (!e.ParseFromString(s.Blob(0))) return absl::DataLossError("corrupt event in the store");
    events.push_back(std::move(e));
  }
  if (rc != SQLITE_DONE) return s.Error("list events");
  return events;
}

absl::StatusOr<std::vector<v1::Job>> SqliteJobStore::ListUnfinishedJobs() {
  absl::MutexLock lock(&read_mu_);
  return QueryJobs(read_db_, &read_stmts_,
                   "SELECT record FROM jobs WHERE done=0 ORDER BY created, id", "");
}

absl::StatusOr<std::optional<v1::Job>> SqliteJobStore::FindCachedJob(const std::string& job_key) {
  absl::MutexLock lock(&read_mu_);
  PKB_ASSIGN_OR_RETURN(auto jobs,
                       QueryJobs(read_db_, &read_stmts_,
                                 "SELECT record FROM jobs WHERE job_key=?1 AND done=1 AND "
                                 "cacheable=1 ORDER BY updated DESC LIMIT 1",
                                 job_key));
  if (jobs.empty()) return std::nullopt;
  return std::move(jobs.front());
}

absl::StatusOr<std::vector<v1::Job>> SqliteJobStore::ListOkJobs(int32_t problem_id) {
  absl::MutexLock lock(&read_mu_);
  std::string sql = absl::StrCat("SELECT record FROM jobs WHERE done=1 AND status=", int{v1::OK});
  if (problem_id > 0) absl::StrAppend(&sql, " AND problem_id=", problem_id);
  return QueryJobs(read_db_, &read_stmts_, sql + " ORDER BY created", "");
}

}  // namespace pkb
