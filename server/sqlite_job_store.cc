#include "server/sqlite_job_store.h"

#include <sqlite3.h>

#include <map>

#include "absl/strings/str_cat.h"
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

}  // namespace

absl::StatusOr<std::unique_ptr<SqliteJobStore>> SqliteJobStore::Open(const std::string& path) {
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
  std::unique_ptr<SqliteJobStore> store(new SqliteJobStore(db));
  absl::MutexLock lock(&store->mu_);
  PKB_RETURN_IF_ERROR(store->Exec("PRAGMA journal_mode=WAL"));
  PKB_RETURN_IF_ERROR(store->Exec("PRAGMA synchronous=NORMAL"));
  PKB_RETURN_IF_ERROR(store->Exec(kSchema));
  return store;
}

SqliteJobStore::~SqliteJobStore() {
  absl::MutexLock lock(&mu_);
  for (auto& [sql, stmt] : stmts_) sqlite3_finalize(stmt);
  sqlite3_close(db_);
}

absl::Status SqliteJobStore::Step(const char* sql) {
  Stmt s(db_, &stmts_, sql);
  PKB_RETURN_IF_ERROR(s.status());
  if (s.Step() != SQLITE_DONE) return s.Error(sql);
  return absl::OkStatus();
}

absl::Status SqliteJobStore::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return absl::InternalError(absl::StrCat("sqlite: ", msg, " in: ", sql));
  }
  return absl::OkStatus();
}

absl::Status SqliteJobStore::WriteJob(const v1::Job& job, bool insert) {
  v1::Job record = job;
  std::string source = record.request().source();
  record.mutable_request()->clear_source();
  bool done = job.stage() == v1::DONE;
  v1::Status status = job.result().status();
  Stmt s(
      db_, &stmts_,
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
  s.BindBlob(9, record.SerializeAsString());
  if (insert) s.BindBlob(10, source);
  if (s.Step() != SQLITE_DONE) return s.Error(insert ? "insert job" : "update job");
  if (!insert && sqlite3_changes(db_) != 1)
    return absl::NotFoundError(absl::StrCat("no job ", job.job_id()));
  return absl::OkStatus();
}

absl::Status SqliteJobStore::WriteEvent(const v1::EvalEvent& event) {
  Stmt s(db_, &stmts_, "INSERT INTO events(job_id, seq, event) VALUES(?1, ?2, ?3)");
  PKB_RETURN_IF_ERROR(s.status());
  s.Bind(1, event.job_id());
  s.Bind(2, event.sequence());
  s.BindBlob(3, event.SerializeAsString());
  if (s.Step() != SQLITE_DONE) return s.Error("insert event");
  return absl::OkStatus();
}

absl::Status SqliteJobStore::CreateJob(const v1::Job& job, const v1::EvalEvent* first_event) {
  absl::MutexLock lock(&mu_);
  PKB_RETURN_IF_ERROR(Step("BEGIN IMMEDIATE"));
  absl::Status st = WriteJob(job, /*insert=*/true);
  if (st.ok() && first_event) st = WriteEvent(*first_event);
  if (!st.ok()) {
    Step("ROLLBACK").IgnoreError();
    return st;
  }
  return Step("COMMIT");
}

absl::Status SqliteJobStore::UpdateJob(const v1::Job& job, const v1::EvalEvent* event) {
  absl::MutexLock lock(&mu_);
  PKB_RETURN_IF_ERROR(Step("BEGIN IMMEDIATE"));
  absl::Status st = WriteJob(job, /*insert=*/false);
  if (st.ok() && event) st = WriteEvent(*event);
  if (!st.ok()) {
    Step("ROLLBACK").IgnoreError();
    return st;
  }
  return Step("COMMIT");
}

absl::StatusOr<std::vector<v1::Job>> SqliteJobStore::QueryJobs(const std::string& sql,
                                                               const std::string& arg) {
  Stmt s(db_, &stmts_, sql);
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

absl::StatusOr<v1::Job> SqliteJobStore::GetJob(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  PKB_ASSIGN_OR_RETURN(auto jobs, QueryJobs("SELECT record FROM jobs WHERE id=?1", job_id));
  if (jobs.empty()) return absl::NotFoundError(absl::StrCat("no job ", job_id));
  return std::move(jobs.front());
}

absl::StatusOr<std::string> SqliteJobStore::GetSource(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  Stmt s(db_, &stmts_, "SELECT source FROM jobs WHERE id=?1");
  PKB_RETURN_IF_ERROR(s.status());
  s.Bind(1, job_id);
  int rc = s.Step();
  if (rc == SQLITE_ROW) return s.Blob(0);
  if (rc == SQLITE_DONE) return absl::NotFoundError(absl::StrCat("no job ", job_id));
  return s.Error("get source");
}

absl::StatusOr<std::vector<v1::EvalEvent>> SqliteJobStore::ListEvents(const std::string& job_id,
                                                                      int64_t after_sequence) {
  absl::MutexLock lock(&mu_);
  Stmt s(db_, &stmts_, "SELECT event FROM events WHERE job_id=?1 AND seq>?2 ORDER BY seq");
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
  absl::MutexLock lock(&mu_);
  return QueryJobs("SELECT record FROM jobs WHERE done=0 ORDER BY created, id", "");
}

absl::StatusOr<std::optional<v1::Job>> SqliteJobStore::FindCachedJob(const std::string& job_key) {
  absl::MutexLock lock(&mu_);
  PKB_ASSIGN_OR_RETURN(auto jobs,
                       QueryJobs("SELECT record FROM jobs WHERE job_key=?1 AND done=1 AND "
                                 "cacheable=1 ORDER BY updated DESC LIMIT 1",
                                 job_key));
  if (jobs.empty()) return std::nullopt;
  return std::move(jobs.front());
}

absl::StatusOr<std::vector<v1::Job>> SqliteJobStore::ListOkJobs(int32_t problem_id) {
  absl::MutexLock lock(&mu_);
  std::string sql = absl::StrCat("SELECT record FROM jobs WHERE done=1 AND status=", int{v1::OK});
  if (problem_id > 0) absl::StrAppend(&sql, " AND problem_id=", problem_id);
  return QueryJobs(sql + " ORDER BY created", "");
}

}  // namespace pkb
