#include "server/postgres_job_store.h"

#include <map>
#include <optional>
#include <pqxx/pqxx>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "server/problem_catalog.h"

namespace pkb {

struct PostgresJobStore::Connection {
  explicit Connection(const std::string& conninfo) : conn(conninfo) {}
  pqxx::connection conn;
  std::map<std::string, std::string> prepared;  // SQL -> statement name, prepared once

  // The name of `sql` prepared on this connection.
  const std::string& Prepared(const std::string& sql) {
    auto it = prepared.find(sql);
    if (it != prepared.end()) return it->second;
    std::string name = absl::StrCat("pkb_", prepared.size());
    conn.prepare(name, sql);
    return prepared.emplace(sql, std::move(name)).first->second;
  }
};

namespace {

// Migration 1: the whole schema as the SQLite store has it at its version 1. Booleans and arrays
// where PostgreSQL has them; id collates bytewise ("C"), so listings tie-break as in SQLite.
constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE jobs (
  id TEXT COLLATE "C" PRIMARY KEY,
  job_key TEXT NOT NULL,
  done BOOLEAN NOT NULL,
  status INTEGER NOT NULL,
  cacheable BOOLEAN NOT NULL,
  problem_id INTEGER NOT NULL,
  created BIGINT NOT NULL,
  updated BIGINT NOT NULL,
  finished BIGINT NOT NULL,
  world_size INTEGER NOT NULL,
  dtype TEXT NOT NULL,
  gpu_class TEXT NOT NULL,
  submitter TEXT NOT NULL,
  model TEXT NOT NULL,
  agent TEXT NOT NULL,
  tags TEXT[] NOT NULL,
  ranked BOOLEAN NOT NULL,
  is_copy BOOLEAN NOT NULL,
  source_sha256 TEXT NOT NULL,
  record BYTEA NOT NULL,
  source BYTEA NOT NULL
);
CREATE INDEX jobs_by_key ON jobs(job_key, updated) WHERE done AND cacheable;
CREATE INDEX jobs_unfinished ON jobs(created, id) WHERE NOT done;
CREATE INDEX jobs_by_finished ON jobs(finished, id);
CREATE INDEX jobs_by_problem ON jobs(problem_id, done, status, finished);
CREATE INDEX jobs_by_submitter ON jobs(submitter, created);
CREATE INDEX jobs_by_source ON jobs(problem_id, source_sha256);
CREATE INDEX jobs_by_tag ON jobs USING GIN (tags);
CREATE TABLE events (
  job_id TEXT COLLATE "C" NOT NULL,
  seq BIGINT NOT NULL,
  event BYTEA NOT NULL,
  PRIMARY KEY (job_id, seq)
);
)sql";

// The numbered steps, in order: kMigrations[i] brings version i to i + 1. Append only; a step
// that shipped is never edited, since databases out there already went through it.
struct Migration {
  const char* what;
  const char* sql;
};
constexpr Migration kMigrations[] = {
    {"jobs and events with the leaderboard's metadata columns", kSchemaV1},
    {"confirmation runs (jobs.confirms)",
     "ALTER TABLE jobs ADD COLUMN confirms TEXT COLLATE \"C\" NOT NULL DEFAULT ''"},
};
constexpr int64_t kLatestVersion = sizeof(kMigrations) / sizeof(kMigrations[0]);
// pg_advisory_xact_lock key of the migrations: any constant no other user of the database takes.
constexpr int64_t kMigrationLock = 0x706b622d6d6967;  // "pkb-mig"

constexpr const char* kInsertJob =
    "INSERT INTO jobs(id, job_key, done, status, cacheable, problem_id, created, updated, record, "
    "world_size, dtype, gpu_class, submitter, model, agent, tags, ranked, is_copy, source_sha256, "
    "finished, confirms, source) VALUES($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, "
    "$14, $15, $16::text[], $17, $18, $19, $20, $21, $22)";
constexpr const char* kUpdateJob =
    "UPDATE jobs SET job_key=$2, done=$3, status=$4, cacheable=$5, problem_id=$6, created=$7, "
    "updated=$8, record=$9, world_size=$10, dtype=$11, gpu_class=$12, submitter=$13, model=$14, "
    "agent=$15, tags=$16::text[], ranked=$17, is_copy=$18, source_sha256=$19, finished=$20, "
    "confirms=$21 WHERE id=$1";
constexpr const char* kInsertEvent = "INSERT INTO events(job_id, seq, event) VALUES($1, $2, $3)";

// One error model: what went wrong, in codes the scheduler and gRPC understand.
absl::Status PgError(const std::exception& e, const std::string& what) {
  std::string msg =
      absl::StrCat("postgresql ", what, ": ", absl::StripTrailingAsciiWhitespace(e.what()));
  if (dynamic_cast<const pqxx::unique_violation*>(&e)) return absl::AlreadyExistsError(msg);
  if (dynamic_cast<const pqxx::in_doubt_error*>(&e)) {
    return absl::UnknownError(absl::StrCat(msg, " (the commit's outcome is unknown)"));
  }
  if (dynamic_cast<const pqxx::broken_connection*>(&e)) return absl::UnavailableError(msg);
  return absl::InternalError(msg);
}

bool IsConnectionLost(const absl::Status& st) {
  return st.code() == absl::StatusCode::kUnavailable || st.code() == absl::StatusCode::kUnknown;
}

// {"a","b"}: a text[] literal, each element quoted, so any tag round-trips.
std::string ArrayLiteral(const google::protobuf::RepeatedPtrField<std::string>& items) {
  std::string out = "{";
  for (const std::string& item : items) {
    if (out.size() > 1) out += ',';
    out += '"';
    for (char c : PostgresJobStore::TextColumn(item)) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
  }
  return out + "}";
}

const char* Bool(bool b) { return b ? "true" : "false"; }

std::string GpuClassColumn(const v1::Job& job) {
  return job.gpu_class().empty() ? SpecOfRecord(job.request()).gpu_class() : job.gpu_class();
}

// Inserts or replaces the job row; NOT_FOUND for an update of an unknown id. Throws what pqxx
// throws.
absl::Status WriteJob(pqxx::transaction_base& tx, const std::string& statement, const v1::Job& job,
                      bool insert) {
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
  auto text = &PostgresJobStore::TextColumn;
  pqxx::binarystring record_bytes(record);
  pqxx::result res;
  auto exec = [&](auto&&... last) {
    return tx.exec_prepared(
        statement, text(job.job_id()), text(job.job_key()), Bool(done), int64_t{status},
        Bool(IsCacheEntry(job)), int64_t{spec.problem_id()}, job.created_unix_micros(),
        job.updated_unix_micros(), record_bytes, int64_t{spec.world_size()}, text(spec.dtype()),
        text(GpuClassColumn(job)), text(r.submitter()), text(r.model()), text(r.agent()),
        ArrayLiteral(r.tags()), Bool(spec.ranked()), Bool(!job.cached_from_job_id().empty()),
        text(job.source_sha256()), done ? job.updated_unix_micros() : int64_t{0},
        text(job.confirms_job_id()), last...);
  };
  if (insert) {
    res = exec(pqxx::binarystring(source));
  } else {
    res = exec();
  }
  if (!insert && res.affected_rows() != 1) {
    return absl::NotFoundError(absl::StrCat("no job ", job.job_id()));
  }
  return absl::OkStatus();
}

}  // namespace

std::string PostgresJobStore::TextColumn(const std::string& s) {
  // Valid UTF-8 without NUL passes unchanged (the common case: one scan, one copy).
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = s[i];
    size_t n = c < 0x80                 ? 1
               : c >= 0xC2 && c <= 0xDF ? 2
               : c >= 0xE0 && c <= 0xEF ? 3
               : c >= 0xF0 && c <= 0xF4 ? 4
                                        : 0;
    bool ok = n != 0 && c != 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) {
      unsigned char d = s[i + k];
      ok = (d & 0xC0) == 0x80;
      // The second byte's narrower ranges: no overlong forms, surrogates or code points > U+10FFFF.
      if (k == 1 && ok) {
        ok = !(c == 0xE0 && d < 0xA0) && !(c == 0xED && d > 0x9F) && !(c == 0xF0 && d < 0x90) &&
             !(c == 0xF4 && d > 0x8F);
      }
    }
    if (ok) {
      out.append(s, i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD for the one byte that does not fit
      i += 1;
    }
  }
  return out;
}

PostgresJobStore::PostgresJobStore(std::string conninfo)
    : conninfo_(std::move(conninfo)), where_(RedactStoreLocation(conninfo_)) {}

absl::Status PostgresJobStore::Connect(std::unique_ptr<Connection>* conn) {
  if (*conn && (*conn)->conn.is_open()) return absl::OkStatus();
  conn->reset();
  try {
    *conn = std::make_unique<Connection>(conninfo_);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("cannot connect to the job store ", where_, ": ",
                                               absl::StripTrailingAsciiWhitespace(e.what())));
  }
  return absl::OkStatus();
}

namespace {

// Brings the database to kLatestVersion, one transaction per step, each recorded in
// schema_migrations.
absl::Status Migrate(pqxx::connection& conn, const std::string& where) {
  for (;;) {
    int64_t version = 0;
    const Migration* step = nullptr;
    try {
      pqxx::work tx(conn);
      // "already exists, skipping" notices would reach the coordinator's stderr on every start.
      tx.exec("SET LOCAL client_min_messages = warning");
      tx.exec(absl::StrCat("SELECT pg_advisory_xact_lock(", kMigrationLock, ")"));
      tx.exec(
          "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
          "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())");
      version =
          tx.exec("SELECT coalesce(max(version), 0) FROM schema_migrations")[0][0].as<int64_t>();
      if (version > kLatestVersion) {
        return absl::FailedPreconditionError(absl::StrCat(
            "job store ", where, " is at schema version ", version, ", newer than this binary's ",
            kLatestVersion, ": run a coordinator at least as new as the one that last opened it"));
      }
      if (version == kLatestVersion) {
        tx.commit();
        return absl::OkStatus();
      }
      step = &kMigrations[version];
      tx.exec(step->sql);
      tx.exec_params("INSERT INTO schema_migrations(version) VALUES($1)", version + 1);
      tx.commit();
    } catch (const std::exception& e) {
      if (step == nullptr) return PgError(e, absl::StrCat("schema of ", where));
      return PgError(e, absl::StrCat(where, ": migration ", version + 1, " (", step->what, ")"));
    }
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<PostgresJobStore>> PostgresJobStore::Open(
    const std::string& conninfo) {
  std::unique_ptr<PostgresJobStore> store(new PostgresJobStore(conninfo));
  {
    absl::MutexLock lock(&store->write_mu_);
    PKB_RETURN_IF_ERROR(store->Connect(&store->write_conn_));
    PKB_RETURN_IF_ERROR(Migrate(store->write_conn_->conn, store->where_));
  }
  {
    absl::MutexLock lock(&store->read_mu_);
    PKB_RETURN_IF_ERROR(store->Connect(&store->read_conn_));
  }
  store->StartWriter();
  return store;
}

PostgresJobStore::~PostgresJobStore() { StopWriter(); }

std::vector<absl::Status> PostgresJobStore::CommitBatch(const std::vector<Pending>& batch) {
  absl::MutexLock lock(&write_mu_);
  std::vector<absl::Status> results(batch.size());
  absl::Status st = Connect(&write_conn_);
  if (st.ok()) {
    Connection& c = *write_conn_;
    try {
      const std::string& insert_job = c.Prepared(kInsertJob);
      const std::string& update_job = c.Prepared(kUpdateJob);
      const std::string& insert_event = c.Prepared(kInsertEvent);
      pqxx::work tx(c.conn);
      for (size_t i = 0; i < batch.size(); ++i) {
        const JobWrite& w = batch[i].write;
        // Savepoints by hand: pqxx 6's subtransaction does not open its savepoint before a
        // prepared statement runs in it. A failure of the savepoint statements themselves throws
        // out of the loop and fails the batch; without them the server would turn the COMMIT of
        // an aborted transaction into a silent ROLLBACK.
        tx.exec("SAVEPOINT w");
        try {
          results[i] = WriteJob(tx, w.create ? insert_job : update_job, w.job, w.create);
          if (results[i].ok() && w.event) {
            tx.exec_prepared(insert_event, TextColumn(w.event->job_id()), w.event->sequence(),
                             pqxx::binarystring(w.event->SerializeAsString()));
          }
        } catch (const pqxx::broken_connection&) {
          throw;  // the whole transaction is gone
        } catch (const pqxx::sql_error& e) {
          results[i] = PgError(e, w.create ? "insert job" : "update job");
        }
        if (!results[i].ok()) tx.exec("ROLLBACK TO SAVEPOINT w");
        tx.exec("RELEASE SAVEPOINT w");
      }
      tx.commit();
    } catch (const std::exception& e) {
      st = PgError(e, "commit");
    }
  }
  if (!st.ok()) {
    for (absl::Status& r : results) r = st;  // nothing of the batch was stored
    if (IsConnectionLost(st)) write_conn_.reset();
  }
  return results;
}

PostgresJobStore::Rows PostgresJobStore::Read(const std::string& sql,
                                              const std::vector<std::string>& params,
                                              const char* what) {
  absl::MutexLock lock(&read_mu_);
  absl::Status st;
  for (int attempt = 0; attempt < 2; ++attempt) {
    st = Connect(&read_conn_);
    if (!st.ok()) continue;
    try {
      const std::string& name = read_conn_->Prepared(sql);
      pqxx::nontransaction tx(read_conn_->conn);
      pqxx::result res = tx.exec_prepared(name, pqxx::prepare::make_dynamic_params(params));
      std::vector<std::string> rows;
      rows.reserve(res.size());
      for (const pqxx::row& row : res) rows.push_back(pqxx::binarystring(row[0]).str());
      return rows;
    } catch (const std::exception& e) {
      st = PgError(e, what);
      if (!IsConnectionLost(st)) return st;
      read_conn_.reset();  // and try once more on a fresh connection
    }
  }
  return st;
}

namespace {

absl::StatusOr<std::vector<v1::Job>> ParseJobs(absl::StatusOr<std::vector<std::string>> rows) {
  if (!rows.ok()) return rows.status();
  std::vector<v1::Job> jobs(rows->size());
  for (size_t i = 0; i < rows->size(); ++i) {
    if (!jobs[i].ParseFromString((*rows)[i])) {
      return absl::DataLossError("corrupt job record in the store");
    }
    UpgradeStoredJob(&jobs[i]);
  }
  return jobs;
}

}  // namespace

absl::StatusOr<v1::Job> PostgresJobStore::GetJob(const std::string& job_id) {
  PKB_ASSIGN_OR_RETURN(auto jobs, ParseJobs(Read("SELECT record FROM jobs WHERE id=$1",
                                                 {TextColumn(job_id)}, "get job")));
  if (jobs.empty()) return absl::NotFoundError(absl::StrCat("no job ", job_id));
  return std::move(jobs.front());
}

absl::StatusOr<std::string> PostgresJobStore::GetSource(const std::string& job_id) {
  PKB_ASSIGN_OR_RETURN(
      auto rows, Read("SELECT source FROM jobs WHERE id=$1", {TextColumn(job_id)}, "get source"));
  if (rows.empty()) return absl::NotFoundError(absl::StrCat("no job ", job_id));
  return std::move(rows.front());
}

absl::StatusOr<std::vector<v1::EvalEvent>> PostgresJobStore::ListEvents(const std::string& job_id,
                                                                        int64_t after_sequence) {
  PKB_ASSIGN_OR_RETURN(auto rows,
                       Read("SELECT event FROM events WHERE job_id=$1 AND seq>$2 ORDER BY seq",
                            {TextColumn(job_id), absl::StrCat(after_sequence)}, "list events"));
  std::vector<v1::EvalEvent> events(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!events[i].ParseFromString(rows[i])) {
      return absl::DataLossError("corrupt event in the store");
    }
  }
  return events;
}

absl::StatusOr<std::vector<v1::Job>> PostgresJobStore::ListUnfinishedJobs() {
  return ParseJobs(Read("SELECT record FROM jobs WHERE NOT done ORDER BY created, id", {},
                        "list unfinished jobs"));
}

absl::StatusOr<std::optional<v1::Job>> PostgresJobStore::FindCachedJob(const std::string& job_key) {
  PKB_ASSIGN_OR_RETURN(auto jobs, ParseJobs(Read("SELECT record FROM jobs WHERE job_key=$1 AND "
                                                 "done AND cacheable ORDER BY updated DESC LIMIT 1",
                                                 {TextColumn(job_key)}, "find cached job")));
  if (jobs.empty()) return std::nullopt;
  return std::move(jobs.front());
}

absl::StatusOr<std::vector<v1::Job>> PostgresJobStore::ListJobs(const JobQuery& q) {
  // Built from the fields set, with every value a parameter; each shape is prepared once.
  std::string sql = "SELECT record FROM jobs WHERE true";
  std::vector<std::string> params;
  auto param = [&](const char* cond, std::string value) {
    params.push_back(std::move(value));
    absl::StrAppend(&sql, " AND ", cond, "$", params.size());
  };
  if (q.problem_id) param("problem_id=", absl::StrCat(q.problem_id));
  if (q.world_size) param("world_size=", absl::StrCat(q.world_size));
  if (!q.gpu_class.empty()) param("gpu_class=", TextColumn(q.gpu_class));
  if (!q.dtype.empty()) param("dtype=", TextColumn(q.dtype));
  if (!q.submitter.empty()) param("submitter=", TextColumn(q.submitter));
  if (!q.model.empty()) param("model=", TextColumn(q.model));
  if (!q.agent.empty()) param("agent=", TextColumn(q.agent));
  if (!q.source_sha256.empty()) param("source_sha256=", TextColumn(q.source_sha256));
  if (!q.tag.empty()) {
    params.push_back(TextColumn(q.tag));
    absl::StrAppend(&sql, " AND tags @> ARRAY[$", params.size(), "::text]");  // the GIN index
  }
  if (q.ranked) param("ranked=", Bool(*q.ranked));
  if (q.done_only || !q.statuses.empty()) absl::StrAppend(&sql, " AND done");
  if (!q.statuses.empty()) {
    absl::StrAppend(&sql, " AND status IN (");
    for (size_t i = 0; i < q.statuses.size(); ++i)
      absl::StrAppend(&sql, i ? "," : "", static_cast<int>(q.statuses[i]));
    absl::StrAppend(&sql, ")");
  }
  if (q.exclude_cache_copies) absl::StrAppend(&sql, " AND NOT is_copy");
  if (q.confirmations)
    absl::StrAppend(&sql, *q.confirmations ? " AND confirms<>''" : " AND confirms=''");
  const char* time = q.by_created ? "created" : "finished";
  if (!q.by_created && (q.from_micros || q.to_micros)) absl::StrAppend(&sql, " AND done");
  if (q.from_micros) param(absl::StrCat(time, ">=").c_str(), absl::StrCat(q.from_micros));
  if (q.to_micros) param(absl::StrCat(time, "<").c_str(), absl::StrCat(q.to_micros));
  absl::StrAppend(&sql, " ORDER BY ", time, q.newest_first ? " DESC, id DESC" : ", id");
  if (q.limit > 0) {  // a parameter, so that every limit shares one statement
    params.push_back(absl::StrCat(q.limit));
    absl::StrAppend(&sql, " LIMIT $", params.size());
  }
  return ParseJobs(Read(sql, params, "list jobs"));
}

}  // namespace pkb
