// JobStore on one SQLite file in WAL mode: the embedded default, no server to run.
//
//   absl::StatusOr<std::unique_ptr<SqliteJobStore>> store =
//   SqliteJobStore::Open("/var/pkb/jobs.db");
//
// WAL with synchronous=NORMAL survives a crash (kill -9) of the coordinator without losing a
// committed write. Thread-safe: one connection, serialised by a mutex.
#ifndef PKB_SERVER_SQLITE_JOB_STORE_H_
#define PKB_SERVER_SQLITE_JOB_STORE_H_

#include <map>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "server/job_store.h"

struct sqlite3;
struct sqlite3_stmt;

namespace pkb {

class SqliteJobStore : public JobStore {
 public:
  static absl::StatusOr<std::unique_ptr<SqliteJobStore>> Open(const std::string& path);
  ~SqliteJobStore() override;

  absl::Status CreateJob(const v1::Job& job, const v1::EvalEvent* first_event) override;
  absl::Status UpdateJob(const v1::Job& job, const v1::EvalEvent* event) override;
  absl::StatusOr<v1::Job> GetJob(const std::string& job_id) override;
  absl::StatusOr<std::string> GetSource(const std::string& job_id) override;
  absl::StatusOr<std::vector<v1::EvalEvent>> ListEvents(const std::string& job_id,
                                                        int64_t after_sequence) override;
  absl::StatusOr<std::vector<v1::Job>> ListUnfinishedJobs() override;
  absl::StatusOr<std::optional<v1::Job>> FindCachedJob(const std::string& job_key) override;
  absl::StatusOr<std::vector<v1::Job>> ListOkJobs(int32_t problem_id) override;

 private:
  explicit SqliteJobStore(sqlite3* db) : db_(db) {}
  absl::Status Exec(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs one statement through the statement cache.
  absl::Status Step(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WriteJob(const v1::Job& job, bool insert) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WriteEvent(const v1::EvalEvent& event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::vector<v1::Job>> QueryJobs(const std::string& sql, const std::string& arg)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  sqlite3* db_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, sqlite3_stmt*> stmts_ ABSL_GUARDED_BY(mu_);  // prepared once, reused
};

}  // namespace pkb

#endif  // PKB_SERVER_SQLITE_JOB_STORE_H_
