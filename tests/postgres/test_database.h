// A fresh database on the tests' PostgreSQL server (tests/postgres/start.sh, run by CTest's
// pkb_postgres fixture, which hands its URI over in PKB_TEST_POSTGRES).
//
//   if (std::string why = PostgresSkipReason(); !why.empty()) { WARN(why); return; }
//   auto db = *TestDatabase::Create();
//   auto store = *PostgresJobStore::Open(db->uri());
//
// Each database is created empty and dropped (with whatever still connects to it) when the
// TestDatabase goes away, so cases never see each other's rows.
#ifndef PKB_TESTS_POSTGRES_TEST_DATABASE_H_
#define PKB_TESTS_POSTGRES_TEST_DATABASE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pkb {

// Why PostgreSQL cases cannot run here ("PostgreSQL cases skipped: ..."), or empty if they can.
std::string PostgresSkipReason();

class TestDatabase {
 public:
  static absl::StatusOr<std::unique_ptr<TestDatabase>> Create();
  ~TestDatabase();

  // postgresql:// URI of this database.
  const std::string& uri() const { return uri_; }
  // Runs `sql` in it (for tests that tamper with the schema).
  absl::Status Exec(const std::string& sql);
  // The integer in the first column of the first row of `sql`.
  absl::StatusOr<int64_t> QueryInt(const std::string& sql);

 private:
  TestDatabase(std::string admin_uri, std::string name, std::string uri)
      : admin_uri_(std::move(admin_uri)), name_(std::move(name)), uri_(std::move(uri)) {}
  std::string admin_uri_, name_, uri_;
};

// `uri` with its database replaced by `dbname`.
std::string WithDatabase(const std::string& uri, const std::string& dbname);

}  // namespace pkb

#endif  // PKB_TESTS_POSTGRES_TEST_DATABASE_H_
