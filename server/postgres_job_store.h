// JobStore on a PostgreSQL server: for a coordinator that must be able to move to another host, or
// whose operators want the store's backups, replicas and monitoring to be PostgreSQL's.
//
//   absl::StatusOr<std::unique_ptr<PostgresJobStore>> store =
//       PostgresJobStore::Open("postgresql://pkb@db.internal/pkb");
//
// The connection string is libpq's (a URI or key=value pairs). What it leaves out comes from
// libpq's environment (PGHOST, PGUSER, PGPASSWORD, PGPASSFILE or ~/.pgpass, PGSSLMODE, ...), so a
// password need not appear on a command line. Tables live in the connection's search_path
// (options=-csearch_path=pkb in the connection string gives them a schema of their own).
//
// The same contract and shape as SqliteJobStore: one writer thread with its own connection commits
// everything queued since its last commit in one transaction (each write in its own savepoint, so
// one failing write does not undo the others), then runs the writes' callbacks in order. Reads go
// through a second connection in autocommit (READ COMMITTED): they see committed writes only and
// never wait behind a commit. A write is durable as the server's synchronous_commit makes it.
//
// A lost connection (server restart, failover) fails the batch in flight with UNAVAILABLE (UNKNOWN
// where COMMIT was sent and its answer lost) and is opened again at the next use; a read is retried
// once on a fresh connection before it fails.
//
// Schema: versioned as job_store.h says. Each migration step holds an advisory lock, so several
// coordinators opening one database at once migrate it once.
//
// Text columns: PostgreSQL text is valid UTF-8 without NUL, while a proto string may hold NUL. The
// columns are for filtering (the serialized record is what reads return), so stored values and
// query values pass through one mapping that replaces such bytes with U+FFFD: equal strings stay
// equal; strings that differ only in those bytes may match each other.
//
// Thread-safe.
#ifndef PKB_SERVER_POSTGRES_JOB_STORE_H_
#define PKB_SERVER_POSTGRES_JOB_STORE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "server/job_store.h"

namespace pkb {

class PostgresJobStore : public GroupCommitJobStore {
 public:
  static absl::StatusOr<std::unique_ptr<PostgresJobStore>> Open(const std::string& conninfo);
  ~PostgresJobStore() override;

  absl::StatusOr<v1::Job> GetJob(const std::string& job_id) override;
  absl::StatusOr<std::string> GetSource(const std::string& job_id) override;
  absl::StatusOr<std::vector<v1::EvalEvent>> ListEvents(const std::string& job_id,
                                                        int64_t after_sequence) override;
  absl::StatusOr<std::vector<v1::Job>> ListUnfinishedJobs() override;
  absl::StatusOr<std::optional<v1::Job>> FindCachedJob(const std::string& job_key) override;
  absl::StatusOr<std::vector<v1::Job>> ListJobs(const JobQuery& query) override;

  // The mapping of text columns described above (exposed for tests).
  static std::string TextColumn(const std::string& s);

 private:
  struct Connection;  // a pqxx::connection with the store's statements prepared
  // The serialized values of one result column, with a read's error.
  using Rows = absl::StatusOr<std::vector<std::string>>;

  explicit PostgresJobStore(std::string conninfo);
  // Opens `*conn` unless it is open.
  absl::Status Connect(std::unique_ptr<Connection>* conn);
  // Runs one statement on the read connection (retried once on a fresh one if the connection was
  // lost): the first column of each row, unescaped. `params` are text parameters $1, $2, ...
  Rows Read(const std::string& sql, const std::vector<std::string>& params, const char* what);
  std::vector<absl::Status> CommitBatch(const std::vector<Pending>& batch) override;

  const std::string conninfo_;
  const std::string where_;  // conninfo_ without its password, for messages

  absl::Mutex write_mu_;  // held by the writer for a commit
  std::unique_ptr<Connection> write_conn_ ABSL_GUARDED_BY(write_mu_);

  absl::Mutex read_mu_;
  std::unique_ptr<Connection> read_conn_ ABSL_GUARDED_BY(read_mu_);

};

}  // namespace pkb

#endif  // PKB_SERVER_POSTGRES_JOB_STORE_H_
