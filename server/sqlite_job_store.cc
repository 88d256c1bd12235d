#include "server/sqlite_job_store.h"

#include <sqlite3.h>

#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/problem_catalog.h"

namespace pkb {

namespace {

// The tables as the first coordinators made them (before schema_migrations; PRAGMA user_version
// 0). Migration 1 creates them where missing, so a new file and an old one take the same path.
constexpr const char* kBaseTables = R"sql(
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

// Migration 1 adds the columns the leaderboard filters on, copied out of the record, and fills
// them from the records already there.
constexpr const char* kAddMetadataColumns[] = {
    "ALTER TABLE jobs ADD COLUMN world_size INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE jobs ADD COLUMN dtype TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE jobs ADD COLUMN gpu_class TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE jobs ADD COLUMN submitter TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE jobs ADD COLUMN model TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE jobs ADD COLUMN agent TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE jobs ADD COLUMN tags TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE jobs ADD COLUMN ranked INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE jobs ADD COLUMN is_copy INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE jobs ADD COLUMN source_sha256 TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE jobs ADD COLUMN finished INTEGER NOT NULL DEFAULT 0",
    "CREATE INDEX IF NOT EXISTS jobs_by_problem ON jobs(problem_id, done, status, finished)",
    "CREATE INDEX IF NOT EXISTS jobs_by_submitter ON jobs(submitter, created)",
    "CREATE INDEX IF NOT EXISTS jobs_by_source ON jobs(problem_id, source_sha256)",
};

// Tags as one column: each wrapped in \x1f, so `instr(tags, '\x1f' || tag || '\x1f')` finds one.
std::string TagsColumn(const v1::Job& job) {
  std::string out;
  for (const std::string& t : job.request().tags()) absl::StrAppend(&out, "\x1f", t, "\x1f");
  return out;
}

std::string GpuClassColumn(const v1::Job& job) {
  return job.gpu_class().empty() ? SpecOfRecord(job.request()).gpu_class() : job.gpu_class();
}

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
  const v1::SubmitRequest& r = job.request();
  const v1::EvalSpec spec = SpecOfRecord(r);
  Stmt s(db, cache,
         insert ? "INSERT INTO jobs(id, job_key, done, status, cacheable, problem_id, created, "
                  "updated, record, world_size, dtype, gpu_class, submitter, model, agent, tags, "
                  "ranked, is_copy, source_sha256, finished, confirms, source) VALUES(?1, ?2, "
                  "?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, "
                  "?20, ?21, ?22)"
                : "UPDATE jobs SET job_key=?2, done=?3, status=?4, cacheable=?5, problem_id=?6, "
                  "created=?7, updated=?8, record=?9, world_size=?10, dtype=?11, gpu_class=?12, "
                  "submitter=?13, model=?14, agent=?15, tags=?16, ranked=?17, is_copy=?18, "
                  "source_sha256=?19, finished=?20, confirms=?21 WHERE id=?1");
  PKB_RETURN_IF_ERROR(s.status());
  s.Bind(1, job.job_id());
  s.Bind(2, job.job_key());
  s.Bind(3, int64_t{done});
  s.Bind(4, int64_t{status});
  s.Bind(5, int64_t{IsCacheEntry(job)});
  s.Bind(6, int64_t{spec.problem_id()});
  s.Bind(7, job.created_unix_micros());
  s.Bind(8, job.updated_unix_micros());
  s.BindBlob(9, record);
  s.Bind(10, int64_t{spec.world_size()});
  s.Bind(11, spec.dtype());
  s.Bind(12, GpuClassColumn(job));
  s.Bind(13, r.submitter());
  s.Bind(14, r.model());
  s.Bind(15, r.agent());
  s.Bind(16, TagsColumn(job));
  s.Bind(17, int64_t{spec.ranked()});
  s.Bind(18, int64_t{!job.cached_from_job_id().empty()});
  s.Bind(19, job.source_sha256());
  s.Bind(20, done ? job.updated_unix_micros() : int64_t{0});
  s.Bind(21, job.confirms_job_id());
  if (insert) s.BindBlob(22, source);
  if (s.Step() != SQLITE_DONE) return s.Error(insert ? "insert job" : "update job");
  if (!insert && sqlite3_changes(db) != 1)
    return absl::NotFoundError(absl::StrCat("no job ", job.job_id()));
  return absl::OkStatus();
}

// Reads one integer (the first column of the first row; 0 for none or NULL).
absl::StatusOr<int64_t> QueryInt(sqlite3* db, const char* sql) {
  StmtCache cache;
  absl::StatusOr<int64_t> out = int64_t{0};
  {
    Stmt s(db, &cache, sql);
    int rc = s.status().ok() ? s.Step() : SQLITE_ERROR;
    if (!s.status().ok()) {
      out = s.status();
    } else if (rc == SQLITE_ROW) {
      out = s.Int(0);
    } else if (rc != SQLITE_DONE) {
      out = s.Error(sql);
    }
  }
  for (auto& [sql, stmt] : cache) sqlite3_finalize(stmt);
  return out;
}

// Migration 1: the base tables where missing, the metadata columns, and those columns filled from
// the records of a file that had the base tables only.
absl::Status MigrateTo1(sqlite3* db) {
  PKB_RETURN_IF_ERROR(Exec(db, kBaseTables));
  for (const char* sql : kAddMetadataColumns) PKB_RETURN_IF_ERROR(Exec(db, sql));
  std::vector<v1::Job> jobs;
  StmtCache cache;
  absl::Status st;
  {
    Stmt s(db, &cache, "SELECT record FROM jobs");
    st = s.status();
    int rc = SQLITE_DONE;
    while (st.ok() && (rc = s.Step()) == SQLITE_ROW) {
      v1::Job job;
      if (!job.ParseFromString(s.Blob(0))) st = absl::DataLossError("corrupt job record");
      UpgradeStoredJob(&job);
      jobs.push_back(std::move(job));
    }
    if (st.ok() && rc != SQLITE_DONE) st = s.Error("migrate: read jobs");
  }
  // The columns of version 1 only: a later step's columns do not exist yet here.
  for (const v1::Job& job : jobs) {
    if (!st.ok()) break;
    const v1::SubmitRequest& r = job.request();
    const v1::EvalSpec spec = SpecOfRecord(r);
    const bool done = job.stage() == v1::DONE;
    Stmt u(db, &cache,
           "UPDATE jobs SET world_size=?2, dtype=?3, gpu_class=?4, submitter=?5, model=?6, "
           "agent=?7, tags=?8, ranked=?9, is_copy=?10, source_sha256=?11, finished=?12 "
           "WHERE id=?1");
    st = u.status();
    if (!st.ok()) break;
    u.Bind(1, job.job_id());
    u.Bind(2, int64_t{spec.world_size()});
    u.Bind(3, spec.dtype());
    u.Bind(4, GpuClassColumn(job));
    u.Bind(5, r.submitter());
    u.Bind(6, r.model());
    u.Bind(7, r.agent());
    u.Bind(8, TagsColumn(job));
    u.Bind(9, int64_t{spec.ranked()});
    u.Bind(10, int64_t{!job.cached_from_job_id().empty()});
    u.Bind(11, job.source_sha256());
    u.Bind(12, done ? job.updated_unix_micros() : int64_t{0});
    if (u.Step() != SQLITE_DONE) st = u.Error("migrate: fill metadata columns");
  }
  for (auto& [sql, stmt] : cache) sqlite3_finalize(stmt);
  return st;
}

// Migration 2: the confirmation run's original, so boards can tell confirmation runs apart.
absl::Status MigrateTo2(sqlite3* db) {
  return Exec(db, "ALTER TABLE jobs ADD COLUMN confirms TEXT NOT NULL DEFAULT ''");
}

// The numbered steps, in order: migrations[i] brings version i to i + 1. Append only; a step that
// shipped is never edited, since files out there already went through it.
struct Migration {
  const char* what;
  absl::Status (*apply)(sqlite3* db);
};
constexpr Migration kMigrations[] = {
    {"jobs and events with the leaderboard's metadata columns", MigrateTo1},
    {"confirmation runs (jobs.confirms)", MigrateTo2},
};
constexpr int64_t kLatestVersion = sizeof(kMigrations) / sizeof(kMigrations[0]);

// Brings the file to kLatestVersion, one transaction per step, each recorded in schema_migrations
// (and in PRAGMA user_version, which the coordinators from before schema_migrations read).
absl::Status Migrate(sqlite3* db, const std::string& path) {
  for (;;) {
    // The version is read inside the write transaction, so two processes opening one old file
    // migrate it once.
    PKB_RETURN_IF_ERROR(Exec(db, "BEGIN IMMEDIATE"));
    absl::Status st = Exec(db,
                           "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY "
                           "KEY, applied_at TEXT NOT NULL DEFAULT "
                           "(strftime('%Y-%m-%dT%H:%M:%fZ', 'now')))");
    absl::StatusOr<int64_t> version =
        st.ok() ? QueryInt(db, "SELECT max(version) FROM schema_migrations")
                : absl::StatusOr<int64_t>(st);
    if (version.ok() && *version == 0) {
      // A file from before schema_migrations knew its version by user_version only: adopt it.
      version = QueryInt(db, "PRAGMA user_version");
      for (int64_t v = 1; version.ok() && v <= *version; ++v) {
        st = Exec(db,
                  absl::StrCat("INSERT INTO schema_migrations(version) VALUES(", v, ")").c_str());
        if (!st.ok()) version = st;
      }
    }
    if (version.ok() && *version > kLatestVersion) {
      version = absl::FailedPreconditionError(absl::StrCat(
          "job store ", path, " is at schema version ", *version, ", newer than this binary's ",
          kLatestVersion, ": run a coordinator at least as new as the one that last opened it"));
    }
    if (!version.ok()) {
      Exec(db, "ROLLBACK").IgnoreError();
      return version.status();
    }
    if (*version == kLatestVersion) return Exec(db, "COMMIT");
    const Migration& m = kMigrations[*version];
    int64_t next = *version + 1;
    st = m.apply(db);
    if (st.ok()) {
      st = Exec(db, absl::StrCat("INSERT INTO schema_migrations(version) VALUES(", next,
                                 "); PRAGMA user_version=", next)
                        .c_str());
    }
    if (st.ok()) st = Exec(db, "COMMIT");
    if (!st.ok()) {
      Exec(db, "ROLLBACK").IgnoreError();
      return absl::Status(st.code(), absl::StrCat("job store ", path, ": migration ", next, " (",
                                                  m.what, "): ", st.message()));
    }
  }
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
    UpgradeStoredJob(&job);
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

absl::StatusOr<std::unique_ptr<SqliteJobStore>> SqliteJobStore::Open(const std::string& path) {
  PKB_ASSIGN_OR_RETURN(sqlite3 * write_db, OpenConnection(path));
  absl::Status st = Exec(write_db, "PRAGMA journal_mode=WAL");
  if (st.ok()) st = Exec(write_db, "PRAGMA synchronous=NORMAL");
  if (st.ok()) st = Migrate(write_db, path);
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
  StartWriter();
}

SqliteJobStore::~SqliteJobStore() {
  StopWriter();
  absl::MutexLock wl(&write_mu_);
  absl::MutexLock rl(&read_mu_);
  // Every statement, of both caches, is finalized first: sqlite3_close refuses (and leaks the
  // connection) while one is left, and a ":memory:" store prepares both on one connection.
  for (auto& [sql, stmt] : write_stmts_) sqlite3_finalize(stmt);
  for (auto& [sql, stmt] : read_stmts_) sqlite3_finalize(stmt);
  if (read_db_ != write_db_) sqlite3_close(read_db_);
  sqlite3_close(write_db_);
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

absl::StatusOr<std::vector<v1::Job>> SqliteJobStore::ListJobs(const JobQuery& q) {
  // Built from the fields set, with every value bound; prepared statements are cached per shape.
  std::string sql = "SELECT record FROM jobs WHERE 1";
  std::vector<std::string> texts;
  std::vector<int64_t> ints;
  std::vector<std::pair<bool, size_t>> binds;  // (is text, index)
  auto text = [&](const char* cond, const std::string& v) {
    texts.push_back(v);
    binds.emplace_back(true, texts.size() - 1);
    absl::StrAppend(&sql, " AND ", cond, "?", binds.size());
  };
  auto num = [&](const char* cond, int64_t v) {
    ints.push_back(v);
    binds.emplace_back(false, ints.size() - 1);
    absl::StrAppend(&sql, " AND ", cond, "?", binds.size());
  };
  if (q.problem_id) num("problem_id=", q.problem_id);
  if (q.world_size) num("world_size=", q.world_size);
  if (!q.gpu_class.empty()) text("gpu_class=", q.gpu_class);
  if (!q.dtype.empty()) text("dtype=", q.dtype);
  if (!q.submitter.empty()) text("submitter=", q.submitter);
  if (!q.model.empty()) text("model=", q.model);
  if (!q.agent.empty()) text("agent=", q.agent);
  if (!q.source_sha256.empty()) text("source_sha256=", q.source_sha256);
  if (!q.tag.empty()) {
    texts.push_back(absl::StrCat("\x1f", q.tag, "\x1f"));
    binds.emplace_back(true, texts.size() - 1);
    absl::StrAppend(&sql, " AND instr(tags, ?", binds.size(), ")>0");
  }
  if (q.ranked) num("ranked=", *q.ranked);
  if (q.done_only || !q.statuses.empty()) absl::StrAppend(&sql, " AND done=1");
  if (!q.statuses.empty()) {
    absl::StrAppend(&sql, " AND status IN (");
    for (size_t i = 0; i < q.statuses.size(); ++i)
      absl::StrAppend(&sql, i ? "," : "", static_cast<int>(q.statuses[i]));
    absl::StrAppend(&sql, ")");
  }
  if (q.exclude_cache_copies) absl::StrAppend(&sql, " AND is_copy=0");
  if (q.confirmations)
    absl::StrAppend(&sql, *q.confirmations ? " AND confirms<>''" : " AND confirms=''");
  const char* time = q.by_created ? "created" : "finished";
  if (!q.by_created && (q.from_micros || q.to_micros)) absl::StrAppend(&sql, " AND done=1");
  if (q.from_micros) num(absl::StrCat(time, ">=").c_str(), q.from_micros);
  if (q.to_micros) num(absl::StrCat(time, "<").c_str(), q.to_micros);
  absl::StrAppend(&sql, " ORDER BY ", time, q.newest_first ? " DESC, id DESC" : ", id");
  ints.push_back(q.limit > 0 ? q.limit : -1);  // bound, so that each limit shares one statement
  binds.emplace_back(false, ints.size() - 1);
  absl::StrAppend(&sql, " LIMIT ?", binds.size());

  absl::MutexLock lock(&read_mu_);
  Stmt s(read_db_, &read_stmts_, sql);
  PKB_RETURN_IF_ERROR(s.status());
  for (size_t i = 0; i < binds.size(); ++i) {
    if (binds[i].first) {
      s.Bind(static_cast<int>(i + 1), texts[binds[i].second]);
    } else {
      s.Bind(static_cast<int>(i + 1), ints[binds[i].second]);
    }
  }
  std::vector<v1::Job> jobs;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) {
    v1::Job job;
    if (!job.ParseFromString(s.Blob(0)))
      return absl::DataLossError("corrupt job record in the store");
    UpgradeStoredJob(&job);
    jobs.push_back(std::move(job));
  }
  if (rc != SQLITE_DONE) return s.Error("list jobs");
  return jobs;
}

}  // namespace pkb
