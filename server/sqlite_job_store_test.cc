#include "server/sqlite_job_store.h"

#include <sqlite3.h>

#include <catch2/catch.hpp>

#include "common/files.h"

namespace pkb {
namespace {

TEST_CASE("sqlite store keeps jobs, sources and events across reopen", "[store]") {
  std::string dir = *MakeTempDir("/tmp", "pkb-store-test");
  v1::Job job;
  job.set_job_id("j1");
  job.set_job_key("k1");
  job.set_stage(v1::QUEUED);
  job.mutable_request()->set_source("int main() {}");
  v1::EvalEvent e;
  e.set_job_id("j1");
  e.set_sequence(1);
  {
    auto store = *SqliteJobStore::Open(dir + "/db");
    REQUIRE(store->CreateJob(job, &e).ok());
    CHECK(store->CreateJob(job, nullptr).code() == absl::StatusCode::kAlreadyExists);
    CHECK(store->UpdateJob(job, &e).code() ==
          absl::StatusCode::kAlreadyExists);  // same sequence twice
  }
  auto store = *SqliteJobStore::Open(dir + "/db");
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
  RemoveTree(dir).IgnoreError();
}

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

TEST_CASE("ListJobs filters on metadata, seeds, verdicts and time", "[store]") {
  std::string dir = *MakeTempDir("/tmp", "pkb-store-test");
  auto store = *SqliteJobStore::Open(dir + "/db");
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
  RemoveTree(dir).IgnoreError();
}

TEST_CASE("a store file from before the metadata columns is migrated on open", "[store]") {
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
  for (int reopen = 0; reopen < 2; ++reopen) {  // the second open finds version 1: no-op
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
  RemoveTree(dir).IgnoreError();
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
