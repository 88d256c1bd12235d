// JobStore on one SQLite file in WAL mode: the embedded default, no server to run.
//
//   absl::StatusOr<std::unique_ptr<SqliteJobStore>> store =
//   SqliteJobStore::Open("/var/pkb/jobs.db");
//
// WAL with synchronous=NORMAL survives a crash (kill -9) of the coordinator without losing a
// committed write (a power loss may lose the last commits; synchronous=FULL would not).
//
// Group commit: one writer thread owns the write connection and commits everything queued since
// its last commit in one transaction (each write in its own savepoint, so one failing write does
// not undo the others), then runs the writes' callbacks in order. Reads go through a second
// connection, so they do not wait behind a commit (WAL readers see the last committed state).
// A ":memory:" store has one connection, shared by reads and the writer.
//
// Schema: versioned as job_store.h says (schema_migrations, mirrored in PRAGMA user_version). A
// file from before schema_migrations is adopted at the version its user_version names (0: the
// first coordinators' tables, which migration 1 extends).
//
// Thread-safe.
#ifndef PKB_SERVER_SQLITE_JOB_STORE_H_
#define PKB_SERVER_SQLITE_JOB_STORE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "server/job_store.h"

struct sqlite3;
struct sqlite3_stmt;

namespace pkb {

class SqliteJobStore : public GroupCommitJobStore {
 public:
  static absl::StatusOr<std::unique_ptr<SqliteJobStore>> Open(const std::string& path);
  ~SqliteJobStore() override;

  absl::StatusOr<v1::Job> GetJob(const std::string& job_id) override;
  absl::StatusOr<std::string> GetSource(const std::string& job_id) override;
  absl::StatusOr<std::vector<v1::EvalEvent>> ListEvents(const std::string& job_id,
                                                        int64_t after_sequence) override;
  absl::StatusOr<std::vector<v1::Job>> ListUnfinishedJobs() override;
  absl::StatusOr<std::optional<v1::Job>> FindCachedJob(const std::string& job_key) override;
  absl::StatusOr<std::vector<v1::Job>> ListJobs(const JobQuery& query) override;

 private:
  using StmtCache = std::map<std::string, sqlite3_stmt*>;  // prepared once, reused
  SqliteJobStore(sqlite3* write_db, sqlite3* read_db);
  // Commits `batch` in one transaction; the status of each write, in order.
  std::vector<absl::Status> CommitBatch(const std::vector<Pending>& batch) override;

  absl::Mutex write_mu_;  // held by the writer for a commit
  sqlite3* const write_db_;
  StmtCache write_stmts_ ABSL_GUARDED_BY(write_mu_);

  // read_db_ == write_db_ for ":memory:"; then the writer holds read_mu_ too.
  absl::Mutex read_mu_;
  sqlite3* const read_db_;
  StmtCache read_stmts_ ABSL_GUARDED_BY(read_mu_);

};

}  // namespace pkb

#endif  // PKB_SERVER_SQLITE_JOB_STORE_H_
