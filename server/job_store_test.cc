// The JobStore contract (server/job_store.h), run against every store: SQLite on a temp file and
// PostgreSQL on a fresh database of the tests' server (tests/postgres/). Each case is a function
// of a StoreUnderTest; STORE_TEST_CASE registers it once per store, as "sqlite store: ..." and
// "postgresql store: ..." (tags [sqlite] and [postgresql]). Where no PostgreSQL server was handed
// over (PKB_TEST_POSTGRES), the PostgreSQL cases say they are skipped and why.
#include "server/job_store.h"

#include <sqlite3.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "common/files.h"
#include "server/postgres_job_store.h"
#include "server/sqlite_job_store.h"
#include "tests/postgres/test_database.h"

namespace pkb {
namespace {

class StoreUnderTest {
 public:
  virtual ~StoreUnderTest() = default;
  // A store on this case's database; each call opens the same one again (a restart).
  virtual absl::StatusOr<std::unique_ptr<JobStore>> Open() = 0;
  // SQL behind the store's back: a statement, or the integer a query's first row starts with.
  virtual absl::Status Exec(const std::string& sql) = 0;
  virtual absl::StatusOr<int64_t> QueryInt(const std::string& sql) = 0;
};

class SqliteUnderTest : public StoreUnderTest {
 public:
  SqliteUnderTest() : dir_(*MakeTempDir("/tmp", "pkb-store-test")), path_(dir_ + "/jobs.db") {}
  ~SqliteUnderTest() override { RemoveTree(dir_).IgnoreError(); }
  absl::StatusOr<std::unique_ptr<JobStore>> Open() override {
    auto store = SqliteJobStore::Open(path_);
    if (!store.ok()) return store.status();
    return std::unique_ptr<JobStore>(std::move(*store));
  }
  absl::Status Exec(const std::string& sql) override {
    sqlite3* db = nullptr;
    sqlite3_open(path_.c_str(), &db);
    int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr);
    std::string msg = sqlite3_errmsg(db);
    sqlite3_close(db);
    return rc == SQLITE_OK ? absl::OkStatus() : absl::InternalError(msg);
  }
  absl::StatusOr<int64_t> QueryInt(const std::string& sql) override {
    sqlite3* db = nullptr;
    sqlite3_open(path_.c_str(), &db);
    sqlite3_stmt* st = nullptr;
    absl::StatusOr<int64_t> out = absl::InternalError(sql);
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
      out = sqlite3_column_int64(st, 0);
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return out;
  }
  const std::string& path() const { return path_; }

 private:
  std::string dir_, path_;
};

class PostgresUnderTest : public StoreUnderTest {
 public:
  explicit PostgresUnderTest(std::unique_ptr<TestDatabase> db) : db_(std::move(db)) {}
  absl::StatusOr<std::unique_ptr<JobStore>> Open() override {
    auto store = PostgresJobStore::Open(db_->uri());
    if (!store.ok()) return store.status();
    return std::unique_ptr<JobStore>(std::move(*store));
  }
  absl::Status Exec(const std::string& sql) override { return db_->Exec(sql); }
  absl::StatusOr<int64_t> QueryInt(const std::string& sql) override { return db_->QueryInt(sql); }
  TestDatabase& db() { return *db_; }

 private:
  std::unique_ptr<TestDatabase> db_;
};

void RunOnSqlite(void (*body)(StoreUnderTest&)) {
  SqliteUnderTest t;
  body(t);
}

// Null (after saying why) where no server was handed over.
std::unique_ptr<PostgresUnderTest> MakePostgres() {
  if (std::string why = PostgresSkipReason(); !why.empty()) {
    WARN(why);
    return nullptr;
  }
  absl::StatusOr<std::unique_ptr<TestDatabase>> db = TestDatabase::Create();
  INFO(db.status().ToString());
  REQUIRE(db.ok());
  return std::make_unique<PostgresUnderTest>(std::move(*db));
}

void RunOnPostgres(void (*body)(StoreUnderTest&)) {
  if (std::unique_ptr<PostgresUnderTest> t = MakePostgres()) body(*t);
}

#define STORE_TEST_CASE(name, body)                                          \
  TEST_CASE("sqlite store: " name, "[store][sqlite]") { RunOnSqlite(body); } \
  TEST_CASE("postgresql store: " name, "[store][postgresql]") { RunOnPostgres(body); }

std::unique_ptr<JobStore> Open(StoreUnderTest& t) {
  absl::StatusOr<std::unique_ptr<JobStore>> store = t.Open();
  INFO(store.status().ToString());
  REQUIRE(store.ok());
  return std::move(*store);
}

v1::EvalEvent Event(const std::string& job_id, int64_t seq) {
  v1::EvalEvent e;
  e.set_job_id(job_id);
  e.set_sequence(seq);
  return e;
}

v1::Job QueuedJob(const std::string& id) {
  v1::Job job;
  job.set_job_id(id);
  job.set_job_key("key-" + id);
  job.set_stage(v1::QUEUED);
  job.mutable_request()->set_source("src " + id);
  return job;
}

void KeepsJobsAcrossReopen(StoreUnderTest& t) {
  v1::Job job;
  job.set_job_id("j1");
  job.set_job_key("k1");
  job.set_stage(v1::QUEUED);
  job.mutable_request()->set_source("int main() {}");
  v1::EvalEvent e = Event("j1", 1);
  {
    auto store = Open(t);
    REQUIRE(store->CreateJob(job, &e).ok());
    CHECK(store->CreateJob(job, nullptr).code() == absl::StatusCode::kAlreadyExists);
    CHECK(store->UpdateJob(job, &e).code() ==
          absl::StatusCode::kAlreadyExists);  // same sequence twice
  }
  auto store = Open(t);
  CHECK(store->GetJob("j1")->request().source().empty());
  CHECK(*store->GetSource("j1") == "int main() {}");
  CHECK(store->ListUnfinishedJobs()->size() == 1);
  CHECK(!store->FindCachedJob("k1")->has_value());
  job.set_stage(v1::DONE);
  job.mutable_result()->set_status(v1::OK);
  e.set_sequence(2);
  REQUIRE(store->UpdateJob(job, &e).ok());
  CHECK(store->ListEvents("j1", 0)->size() == 2);
  CHECK(store->ListEvents("j1", 1)->size() == 1);
  CHECK(store->ListUnfinishedJobs()->empty());
  CHECK((*store->FindCachedJob("k1"))->job_id() == "j1");
  JobQuery ok;
  ok.statuses = {v1::OK};
  CHECK(store->ListJobs(ok)->size() == 1);
  CHECK(store->GetJob("nope").status().code() == absl::StatusCode::kNotFound);
  CHECK(store->GetSource("nope").status().code() == absl::StatusCode::kNotFound);
  CHECK(store->ListEvents("nope", 0)->empty());
}
STORE_TEST_CASE("keeps jobs, sources and events across reopen", KeepsJobsAcrossReopen)

void GroupCommit(StoreUnderTest& t) {
  auto store = Open(t);
  absl::Mutex mu;
  std::vector<std::string> seen;  // callbacks and observer calls, in the order they ran
  absl::Notification last;
  int64_t observer = store->AddCommitObserver([&] {
    absl::MutexLock lock(&mu);
    seen.push_back("commit");
    if (std::find(seen.begin(), seen.end(), "d:OK") != seen.end() && !last.HasBeenNotified())
      last.Notify();
  });
  auto record = [&](const std::string& name, JobStore* s, const std::string& id) {
    return [&, name, s, id](const absl::Status& st) {
      // Committed means visible: a read from the callback finds the write.
      bool visible = s->GetJob(id).ok();
      absl::MutexLock lock(&mu);
      seen.push_back(absl::StrCat(name, ":", absl::StatusCodeToString(st.code())));
      INFO(name << ": " << st.ToString());
      if (st.ok()) CHECK(visible);
    };
  };
  v1::EvalEvent e1 = Event("a", 1);
  store->Write({QueuedJob("a"), true, std::nullopt}, record("a", store.get(), "a"));
  store->Write({QueuedJob("a"), true, e1}, record("a-again", store.get(), "a"));
  store->Write({QueuedJob("b"), false, Event("b", 1)}, record("b", store.get(), "b"));
  store->Write({QueuedJob("c"), true, Event("c", 1)}, record("c", store.get(), "c"));
  v1::Job a2 = QueuedJob("a");
  a2.set_stage(v1::COMPILING);
  store->Write({a2, false, Event("a", 1)}, record("a-update", store.get(), "a"));
  store->Write({QueuedJob("d"), true, std::nullopt}, record("d", store.get(), "d"));
  bool done = last.WaitForNotificationWithTimeout(absl::Seconds(30));
  {
    absl::MutexLock lock(&mu);
    INFO(absl::StrJoin(seen, " "));
    REQUIRE(done);
  }
  store->RemoveCommitObserver(observer);
  {
    absl::MutexLock lock(&mu);
    std::vector<std::string> callbacks;
    for (const std::string& s : seen)
      if (s != "commit") callbacks.push_back(s);
    CHECK(callbacks == std::vector<std::string>{"a:OK", "a-again:ALREADY_EXISTS", "b:NOT_FOUND",
                                                "c:OK", "a-update:OK", "d:OK"});
    CHECK(seen.back() == "commit");  // the observer runs after the callbacks of its commit
  }
  // A failed write left nothing behind, not even its event; the others are whole.
  CHECK(store->GetJob("b").status().code() == absl::StatusCode::kNotFound);
  CHECK(store->ListEvents("b", 0)->empty());
  CHECK(store->ListEvents("a", 0)->size() == 1);
  CHECK(store->GetJob("a")->stage() == v1::COMPILING);
  CHECK(store->ListEvents("c", 0)->size() == 1);
  // No observer any more: a write still commits.
  CHECK(store->CreateJob(QueuedJob("e"), nullptr).ok());
  absl::MutexLock lock(&mu);
  CHECK(std::count(seen.begin(), seen.end(), "e:OK") == 0);
}
STORE_TEST_CASE("group commit: callbacks in queue order, one failing write undoes only itself",
                GroupCommit)

void ConcurrentWriters(StoreUnderTest& t) {
  auto store = Open(t);
  constexpr int kThreads = 4, kJobs = 25;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int w = 0; w < kThreads; ++w) {
    threads.emplace_back([&, w] {
      for (int i = 0; i < kJobs; ++i) {
        std::string id = absl::StrCat("w", w, "-", i);
        v1::Job job = QueuedJob(id);
        job.set_created_unix_micros(i);
        v1::EvalEvent e = Event(id, 1);
        if (!store->CreateJob(job, &e).ok()) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(failures == 0);
  auto unfinished = store->ListUnfinishedJobs();
  REQUIRE(unfinished.ok());
  CHECK(unfinished->size() == kThreads * kJobs);
  for (size_t i = 1; i < unfinished->size(); ++i)  // oldest first
    CHECK((*unfinished)[i - 1].created_unix_micros() <= (*unfinished)[i].created_unix_micros());
  CHECK(store->ListEvents("w3-24", 0)->size() == 1);
}
STORE_TEST_CASE("writes from several threads all land, unfinished jobs list oldest first",
                ConcurrentWriters)

// A finished job with leaderboard metadata.
v1::Job DoneJob(const std::string& id, v1::Status status, int64_t finished) {
  v1::Job job;
  job.set_job_id(id);
  job.set_job_key("key-" + id);
  job.set_source_sha256("sha-" + id);
  job.set_stage(v1::DONE);
  job.set_created_unix_micros(finished - 10);
  job.set_updated_unix_micros(finished);
  job.mutable_request()->set_problem_id(1);
  job.mutable_request()->set_world_size(2);
  job.mutable_request()->set_dtype("bfloat16");
  job.mutable_request()->set_gpu_class("any");
  job.mutable_request()->set_source("src " + id);
  job.mutable_result()->set_status(status);
  return job;
}

std::vector<std::string> Ids(const absl::StatusOr<std::vector<v1::Job>>& jobs) {
  REQUIRE(jobs.ok());
  std::vector<std::string> ids;
  for (const auto& j : *jobs) ids.push_back(j.job_id());
  return ids;
}

void FindCached(StoreUnderTest& t) {
  auto store = Open(t);
  auto same_key = [](v1::Job j) {
    j.set_job_key("K");
    return j;
  };
  v1::Job old_ok = same_key(DoneJob("old", v1::OK, 1000));
  v1::Job new_ok = same_key(DoneJob("new", v1::MISMATCH, 2000));    // a verdict on the submission
  v1::Job lost = same_key(DoneJob("lost", v1::WORKER_LOST, 3000));  // the service's fault
  v1::Job copy = same_key(DoneJob("copy", v1::OK, 4000));
  copy.set_cached_from_job_id("new");
  v1::Job running = same_key(DoneJob("running", v1::OK, 5000));
  running.set_stage(v1::BENCHMARKING);
  v1::Job confirmation = same_key(DoneJob("conf", v1::OK, 6000));  // re-times "old"
  confirmation.set_confirms_job_id("old");
  for (const v1::Job* j : {&old_ok, &new_ok, &lost, &copy, &running, &confirmation})
    REQUIRE(store->CreateJob(*j, nullptr).ok());
  auto hit = store->FindCachedJob("K");
  REQUIRE(hit.ok());
  REQUIRE(hit->has_value());
  CHECK((*hit)->job_id() == "new");
  CHECK((*hit)->request().source().empty());
  CHECK(!store->FindCachedJob("other")->has_value());
}
STORE_TEST_CASE("FindCachedJob: the newest finished cacheable original (no confirmation run)",
                FindCached)

void ListJobsFilters(StoreUnderTest& t) {
  std::unique_ptr<JobStore> store = Open(t);
  v1::Job a = DoneJob("a", v1::OK, 1000);
  a.mutable_request()->set_submitter("alice");
  a.mutable_request()->set_model("m1");
  a.mutable_request()->set_agent("loop");
  a.mutable_request()->add_tags("exp1");
  a.mutable_request()->add_tags("fp8");
  a.set_gpu_class("h200");
  v1::Job b = DoneJob("b", v1::OK, 2000);
  b.mutable_request()->set_submitter("bob");
  b.mutable_request()->set_model("m2");
  b.mutable_request()->set_ranked(true);
  b.mutable_request()->set_world_size(8);
  b.mutable_request()->add_tags("exp10");
  v1::Job c = DoneJob("c", v1::MISMATCH, 3000);
  c.mutable_request()->set_submitter("alice");
  c.mutable_request()->set_problem_id(2);
  v1::Job d = DoneJob("d", v1::OK, 4000);  // a cache hit of a
  d.set_cached_from_job_id("a");
  v1::Job e = DoneJob("e", v1::OK, 5000);  // still running
  e.set_stage(v1::BENCHMARKING);
  e.clear_result();
  for (const v1::Job* j : {&a, &b, &c, &d, &e}) REQUIRE(store->CreateJob(*j, nullptr).ok());

  JobQuery q;  // by finish time; an unfinished job's is 0
  CHECK(Ids(store->ListJobs(q)) == std::vector<std::string>{"e", "a", "b", "c", "d"});
  q.done_only = true;
  CHECK(Ids(store->ListJobs(q)) == std::vector<std::string>{"a", "b", "c", "d"});
  q = {};
  q.by_created = true;
  q.from_micros = 4990;
  CHECK(Ids(store->ListJobs(q)) == std::vector<std::string>{"e"});
  q = {};
  q.submitter = "alice";
  CHECK(Ids(store->ListJobs(q)) == std::vector<std::string>{"a", "c"});
  q.problem_id = 1;
  CHECK(Ids(store->ListJobs(q)) == std::vector<std::string>{"a"});
  q = {};
  q.statuses = {v1::OK};
  CHECK(Ids(store->ListJobs(q)) == std::vector<std::string>{"a", "b", "d"});
  q.exclude_cache_copies = true;
  CHECK(Ids(store->ListJobs(q)) == std::vector<std::string>{"a", "b"});
  q.ranked = true;
  CHECK(Ids(store->ListJobs(q)) == std::vector<std::string>{"b"});
  q.ranked = false;
  CHECK(Ids(store->ListJobs(q)) == std::vector<std::string>{"a"});
  q = {};
  q.gpu_class = "h200";  // the worker's class wins over the requested "any"
  CHECK(Ids(store->ListJobs(q)) == std::vector<std::string>{"a"});
  q.gpu_class = "any";
  CHECK(Ids(store->ListJobs(q)) == std::vector<std::string>{"e", "b", "c", "d"});
  q = {};
  q.tag = "exp1";  // a whole tag, not a prefix of "exp10"
  CHECK(Ids(store->ListJobs(q)) == std::vector<std::string>{"a"});
  q.tag = "fp8";
  CHECK(Ids(store->ListJobs(q)) == std::vector<std::string>{"a"});
  q = {};
  q.model = "m2";
  q.world_size = 8;
  q.dtype = "bfloat16";
  CHECK(Ids(store->ListJobs(q)) == std::vector<std::string>{"b"});
  q = {};
  q.agent = "loop";
  q.source_sha256 = "sha-a";
  CHECK(Ids(store->ListJobs(q)) == std::vector<std::string>{"a"});
  q = {};
  q.from_micros = 2000;
  q.to_micros = 4000;
  CHECK(Ids(store->ListJobs(q)) == std::vector<std::string>{"b", "c"});
  q = {};
  q.newest_first = true;
  q.limit = 2;
  CHECK(Ids(store->ListJobs(q)) == std::vector<std::string>{"d", "c"});
  q.limit = 3;  // another limit, the same statement
  CHECK(Ids(store->ListJobs(q)).size() == 3);
  // An update moves the columns with the record.
  e.set_stage(v1::DONE);
  e.mutable_result()->set_status(v1::OK);
  e.set_gpu_class("h100");
  REQUIRE(store->UpdateJob(e, nullptr).ok());
  q = {};
  q.gpu_class = "h100";
  q.statuses = {v1::OK};
  CHECK(Ids(store->ListJobs(q)) == std::vector<std::string>{"e"});
  // Confirmation runs apart from the results they re-time.
  v1::Job f = DoneJob("f", v1::OK, 6000);
  f.set_confirms_job_id("a");
  REQUIRE(store->CreateJob(f, nullptr).ok());
  q = {};
  q.statuses = {v1::OK};
  q.exclude_cache_copies = true;
  CHECK(Ids(store->ListJobs(q)) == std::vector<std::string>{"a", "b", "e", "f"});
  q.confirmations = false;
  CHECK(Ids(store->ListJobs(q)) == std::vector<std::string>{"a", "b", "e"});
  q.confirmations = true;
  CHECK(Ids(store->ListJobs(q)) == std::vector<std::string>{"f"});
  f.set_confirms_job_id("");  // an update moves the column too
  REQUIRE(store->UpdateJob(f, nullptr).ok());
  CHECK(Ids(store->ListJobs(q)).empty());
}

STORE_TEST_CASE("ListJobs filters on metadata, seeds, verdicts and time", ListJobsFilters)

void AnyBytesInMetadata(StoreUnderTest& t) {
  auto store = Open(t);
  // A proto string may hold NUL (gRPC checks UTF-8, not NUL): SQLite keeps it, PostgreSQL text
  // cannot. Both must return the record unchanged and filter on the value as given. Quotes and
  // braces test the quoting of PostgreSQL's tag array.
  v1::Job a = DoneJob("a", v1::OK, 1000);
  a.mutable_request()->set_submitter(std::string("al\0ice", 6));
  a.mutable_request()->add_tags(std::string("t\0\"{},\\", 8));
  a.mutable_request()->set_model("m\xc3\xa9");
  v1::Job b = DoneJob("b", v1::OK, 2000);
  b.mutable_request()->set_submitter("al");
  b.mutable_request()->add_tags("t");
  for (const v1::Job* j : {&a, &b}) REQUIRE(store->CreateJob(*j, nullptr).ok());
  JobQuery q;
  q.submitter = std::string("al\0ice", 6);
  auto jobs = store->ListJobs(q);
  REQUIRE(Ids(jobs) == std::vector<std::string>{"a"});
  CHECK((*jobs)[0].request().submitter() == a.request().submitter());
  CHECK((*jobs)[0].request().tags(0) == a.request().tags(0));
  q = {};
  q.tag = a.request().tags(0);
  CHECK(Ids(store->ListJobs(q)) == std::vector<std::string>{"a"});
  q.tag = "t";
  CHECK(Ids(store->ListJobs(q)) == std::vector<std::string>{"b"});
  q = {};
  q.model = "m\xc3\xa9";
  CHECK(Ids(store->ListJobs(q)) == std::vector<std::string>{"a"});
}
STORE_TEST_CASE("metadata with NUL bytes round-trips and still filters", AnyBytesInMetadata)

void Migrations(StoreUnderTest& t) {
  Open(t).reset();
  CHECK(*t.QueryInt("SELECT max(version) FROM schema_migrations") == 2);
  CHECK(*t.QueryInt("SELECT count(*) FROM schema_migrations") == 2);
  Open(t).reset();  // nothing to do the second time
  CHECK(*t.QueryInt("SELECT count(*) FROM schema_migrations") == 2);
  // A newer coordinator migrated it further: this one must not write rows it does not understand.
  REQUIRE(t.Exec("INSERT INTO schema_migrations(version) VALUES(99)").ok());
  absl::StatusOr<std::unique_ptr<JobStore>> store = t.Open();
  CHECK(store.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(store.status().message().find("schema version 99, newer than this binary's 2") !=
        std::string::npos);
}
STORE_TEST_CASE("schema_migrations records each version, a newer schema is refused", Migrations)

void ConcurrentOpen(StoreUnderTest& t) {
  // Two coordinators starting at once on a new database: one migrates, the other waits and finds
  // it done.
  absl::Status first, second;
  std::thread other([&] { second = t.Open().status(); });
  first = t.Open().status();
  other.join();
  CHECK(first.ok());
  CHECK(second.ok());
  CHECK(*t.QueryInt("SELECT count(*) FROM schema_migrations") == 2);
}
STORE_TEST_CASE("stores opened at once on a new database migrate it once", ConcurrentOpen)

// SQLite only: files written before schema_migrations existed.

TEST_CASE("sqlite store: a file from before the metadata columns is migrated on open",
          "[store][sqlite]") {
  std::string dir = *MakeTempDir("/tmp", "pkb-store-test");
  std::string path = dir + "/old.db";
  v1::Job old = DoneJob("old", v1::OK, 1234);
  old.mutable_request()->set_submitter("carol");
  old.mutable_request()->set_model("m3");
  {
    // The version-0 schema, as the coordinator wrote it before schema version 1.
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
    const char* schema =
        "CREATE TABLE jobs (id TEXT PRIMARY KEY, job_key TEXT NOT NULL, done INTEGER NOT NULL, "
        "status INTEGER NOT NULL, cacheable INTEGER NOT NULL, problem_id INTEGER NOT NULL, "
        "created INTEGER NOT NULL, updated INTEGER NOT NULL, record BLOB NOT NULL, source BLOB "
        "NOT NULL);"
        "CREATE TABLE events (job_id TEXT NOT NULL, seq INTEGER NOT NULL, event BLOB NOT NULL, "
        "PRIMARY KEY (job_id, seq)) WITHOUT ROWID;";
    REQUIRE(sqlite3_exec(db, schema, nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    REQUIRE(sqlite3_prepare_v2(db,
                               "INSERT INTO jobs VALUES('old', 'k', 1, 1, 1, 1, 1224, 1234, ?1, "
                               "'src')",
                               -1, &st, nullptr) == SQLITE_OK);
    v1::Job record = old;
    record.mutable_request()->clear_source();
    std::string bytes = record.SerializeAsString();
    sqlite3_bind_blob(st, 1, bytes.data(), bytes.size(), SQLITE_TRANSIENT);
    REQUIRE(sqlite3_step(st) == SQLITE_DONE);
    sqlite3_finalize(st);
    sqlite3_close(db);
  }
  for (int reopen = 0; reopen < 2; ++reopen) {  // the second open finds the latest: no-op
    auto store = SqliteJobStore::Open(path);
    REQUIRE(store.ok());
    JobQuery q;
    q.submitter = "carol";
    q.model = "m3";
    q.world_size = 2;
    q.statuses = {v1::OK};
    q.from_micros = 1234;
    CHECK(Ids((*store)->ListJobs(q)) == std::vector<std::string>{"old"});
    CHECK(*(*store)->GetSource("old") == "src");
  }
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, "SELECT group_concat(version) FROM schema_migrations", -1, &st,
                             nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(st) == SQLITE_ROW);
  CHECK(std::string(reinterpret_cast<const char*>(sqlite3_column_text(st, 0))) == "1,2");
  sqlite3_finalize(st);
  sqlite3_close(db);
  RemoveTree(dir).IgnoreError();
}

TEST_CASE("sqlite store: a version-1 file from before schema_migrations is adopted",
          "[store][sqlite]") {
  SqliteUnderTest t;
  {
    auto store = Open(t);
    REQUIRE(store->CreateJob(QueuedJob("j"), nullptr).ok());
  }
  // What a coordinator of schema version 1 left: user_version 1, no schema_migrations, no
  // column of a later version.
  REQUIRE(t.Exec("DROP TABLE schema_migrations").ok());
  REQUIRE(t.Exec("ALTER TABLE jobs DROP COLUMN confirms").ok());
  REQUIRE(t.Exec("PRAGMA user_version=1").ok());
  auto store = Open(t);
  CHECK(*t.QueryInt("SELECT max(version) FROM schema_migrations") == 2);
  CHECK(store->GetJob("j").ok());
  REQUIRE(store->UpdateJob(DoneJob("j", v1::OK, 5), nullptr).ok());  // migration 2 added confirms
}

// PostgreSQL only: the server goes away under the store.

TEST_CASE("postgresql store: a lost connection fails the batch in flight, then reconnects",
          "[store][postgresql]") {
  std::unique_ptr<PostgresUnderTest> t = MakePostgres();
  if (!t) return;
  auto store = Open(*t);
  REQUIRE(store->CreateJob(QueuedJob("a"), nullptr).ok());
  // What a server restart or failover does to the store's connections.
  REQUIRE(t->Exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "
                  "current_database() AND pid <> pg_backend_pid()")
              .ok());
  CHECK(store->GetJob("a").ok());  // a read retries once on a fresh connection
  absl::Status lost = store->CreateJob(QueuedJob("b"), nullptr);
  CHECK(lost.code() == absl::StatusCode::kUnavailable);
  CHECK(store->CreateJob(QueuedJob("b"), nullptr).ok());  // the writer has reconnected
  CHECK(store->GetJob("b").ok());
}

TEST_CASE("postgresql store: unreachable server, redacted passwords, text columns",
          "[store][postgresql]") {
  auto store = PostgresJobStore::Open(
      "postgresql://pkb:hunter2@127.0.0.1:1/pkb?connect_timeout=2&password=hunter2");
  CHECK(store.status().code() == absl::StatusCode::kUnavailable);
  CHECK(store.status().message().find("hunter2") == std::string::npos);
  // Text columns: valid UTF-8 unchanged; NUL and bytes that are not UTF-8 become U+FFFD.
  CHECK(PostgresJobStore::TextColumn("m\xc3\xa9\xf0\x9f\x98\x80") == "m\xc3\xa9\xf0\x9f\x98\x80");
  CHECK(PostgresJobStore::TextColumn(std::string("a\0b\xff\xc3", 5)) ==
        "a\xEF\xBF\xBD"
        "b\xEF\xBF\xBD\xEF\xBF\xBD");
  CHECK(PostgresJobStore::TextColumn("\xed\xa0\x80") ==  // a surrogate, 3 bad bytes
        "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  CHECK(RedactStoreLocation("postgresql://u:pw@h:5/db?sslmode=require&password=x") ==
        "postgresql://u:***@h:5/db?sslmode=require&password=***");
  CHECK(RedactStoreLocation("/var/lib/pkb/jobs.db") == "/var/lib/pkb/jobs.db");
  CHECK(WithDatabase("postgresql:///postgres?host=/tmp/x&user=pkb", "d") ==
        "postgresql:///d?host=/tmp/x&user=pkb");
  CHECK(WithDatabase("postgresql://h:5", "d") == "postgresql://h:5/d");
}

TEST_CASE("worker failures are not cacheable", "[store]") {
  CHECK(IsCacheable(v1::OK));
  CHECK(IsCacheable(v1::MISMATCH));
  CHECK(IsCacheable(v1::COMPILE_ERROR));
  CHECK(!IsCacheable(v1::WORKER_LOST));
  CHECK(!IsCacheable(v1::INTERNAL));
  CHECK(!IsCacheable(v1::NO_DEVICE));
  CHECK(!IsCacheable(v1::CANCELLED));
}

}  // namespace
}  // namespace pkb
