#include "server/sqlite_job_store.h"

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
  CHECK(store->ListOkJobs(0)->size() == 1);
  CHECK(store->GetJob("nope").status().code() == absl::StatusCode::kNotFound);
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
