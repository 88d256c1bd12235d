#include "tests/postgres/test_database.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <pqxx/pqxx>

#include "absl/strings/str_cat.h"

namespace pkb {
namespace {

const char* AdminUri() {
  const char* uri = std::getenv("PKB_TEST_POSTGRES");
  return uri && *uri ? uri : nullptr;
}

absl::Status Run(const std::string& uri, const std::string& sql) {
  try {
    pqxx::connection c(uri);
    pqxx::nontransaction tx(c);  // CREATE/DROP DATABASE refuse to run in a transaction block
    tx.exec(sql);
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("postgresql: ", e.what(), " in: ", sql));
  }
}

}  // namespace

std::string PostgresSkipReason() {
  if (AdminUri()) return "";
  return "PostgreSQL cases skipped: PKB_TEST_POSTGRES is not set (run them through ctest, whose "
         "pkb_postgres fixture starts a server when one is installed: scripts/install-deps.sh)";
}

std::string WithDatabase(const std::string& uri, const std::string& dbname) {
  size_t start = uri.find("://");
  start = start == std::string::npos ? 0 : start + 3;
  size_t query = uri.find('?', start);
  size_t slash = uri.find('/', start);
  if (slash == std::string::npos || slash > query) slash = query;  // no database named
  std::string rest = query == std::string::npos ? "" : uri.substr(query);
  return absl::StrCat(uri.substr(0, slash == std::string::npos ? uri.size() : slash), "/", dbname,
                      rest);
}

absl::StatusOr<std::unique_ptr<TestDatabase>> TestDatabase::Create() {
  const char* admin = AdminUri();
  if (!admin) return absl::FailedPreconditionError(PostgresSkipReason());
  static std::atomic<int> counter{0};
  std::string name = absl::StrCat("pkb_test_", getpid(), "_", counter++);
  absl::Status st = Run(admin, absl::StrCat("DROP DATABASE IF EXISTS ", name, " WITH (FORCE)"));
  if (st.ok()) st = Run(admin, absl::StrCat("CREATE DATABASE ", name));
  if (!st.ok()) return st;
  return std::unique_ptr<TestDatabase>(new TestDatabase(admin, name, WithDatabase(admin, name)));
}

TestDatabase::~TestDatabase() {
  Run(admin_uri_, absl::StrCat("DROP DATABASE IF EXISTS ", name_, " WITH (FORCE)")).IgnoreError();
}

absl::Status TestDatabase::Exec(const std::string& sql) { return Run(uri_, sql); }

absl::StatusOr<int64_t> TestDatabase::QueryInt(const std::string& sql) {
  try {
    pqxx::connection c(uri_);
    pqxx::nontransaction tx(c);
    return tx.exec(sql).at(0).at(0).as<int64_t>();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("postgresql: ", e.what(), " in: ", sql));
  }
}

}  // namespace pkb
