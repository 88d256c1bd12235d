#include "server/reference_times.h"

#include <catch2/catch.hpp>

#include "absl/time/clock.h"
#include "common/files.h"
#include "server/sqlite_job_store.h"

namespace pkb {
namespace {

v1::ProblemSpec Problem1() {
  v1::ProblemSpec p;
  p.set_id(1);
  p.set_default_m(4096);
  p.set_default_n(4096);
  p.set_default_dtype("bfloat16");
  return p;
}

struct Made {
  int w = 2;
  double baseline_node_us = 10;
  double baseline_job_us = 0;  // the job's own, used where the node keeps none
  double graph_us = 0;
  v1::Status status = v1::OK;
  std::string gpu_class = "h200";
  int64_t m = 4096;
  std::string dtype = "bfloat16";
  bool functional = false;
  std::string confirms;
  std::string cached_from;
};

// Made{} with one field changed, for the cases below.
template <typename F>
Made With(F change) {
  Made m;
  change(m);
  return m;
}

v1::Job Make(int i, const Made& s) {
  v1::Job job;
  job.set_job_id("j" + std::to_string(i));
  job.set_job_key("key-j" + std::to_string(i));
  job.set_stage(v1::DONE);
  job.set_gpu_class(s.gpu_class);
  job.set_confirms_job_id(s.confirms);
  job.set_cached_from_job_id(s.cached_from);
  job.set_created_unix_micros(i * 1000 - 500);
  job.set_updated_unix_micros(i * 1000);
  v1::EvalSpec* spec = job.mutable_request()->mutable_spec();
  spec->set_problem_id(1);
  spec->set_world_size(s.w);
  spec->set_m(s.m);
  spec->set_n(4096);
  spec->set_dtype(s.dtype);
  spec->set_functional(s.functional);
  job.mutable_request()->set_problem_id(1);
  job.mutable_request()->set_world_size(s.w);
  job.mutable_request()->set_source("// " + job.job_id());
  v1::EvalResult* r = job.mutable_result();
  r->set_status(s.status);
  r->set_baseline_node_us(s.baseline_node_us);
  r->mutable_baseline()->set_wall_per_iter_us(s.baseline_job_us);
  r->set_baseline_graph_us(s.graph_us);
  return job;
}

TEST_CASE("ReferenceTimesOf: per W and class the newest OK originals at the default shape",
          "[reference_times]") {
  std::vector<v1::Job> newest_first;
  int i = 100;
  // W = 2 on h200: 10..19 us node baselines, newest first; graph figures on some.
  for (int k = 0; k < 10; ++k) newest_first.push_back(Make(i--, {2, 10.0 + k, 0, k < 3 ? 2.0 : 0}));
  // What must not count: each would move W = 2's median if it did.
  newest_first.push_back(Make(i--, With([](Made& m) {
                                m.w = 2;
                                m.baseline_node_us = 500;
                                m.status = v1::MISMATCH;
                              })));
  newest_first.push_back(Make(i--, With([](Made& m) {
                                m.w = 2;
                                m.baseline_node_us = 500;
                                m.m = 1024;
                              })));
  newest_first.push_back(Make(i--, With([](Made& m) {
                                m.w = 2;
                                m.baseline_node_us = 500;
                                m.dtype = "float32";
                              })));
  newest_first.push_back(Make(i--, With([](Made& m) {
                                m.w = 2;
                                m.baseline_node_us = 500;
                                m.functional = true;
                              })));
  newest_first.push_back(Make(i--, With([](Made& m) {
                                m.w = 2;
                                m.baseline_node_us = 500;
                                m.confirms = "j1";
                              })));
  newest_first.push_back(Make(i--, With([](Made& m) {
                                m.w = 2;
                                m.baseline_node_us = 500;
                                m.cached_from = "j1";
                              })));
  newest_first.push_back(Make(i--, With([](Made& m) {
                                m.w = 2;
                                m.baseline_node_us = 0;
                              })));
  // W = 4: one result without a node baseline (its own is used); another class at W = 2.
  newest_first.push_back(Make(i--, With([](Made& m) {
                                m.w = 4;
                                m.baseline_node_us = 0;
                                m.baseline_job_us = 30;
                              })));
  newest_first.push_back(Make(i--, With([](Made& m) {
                                m.w = 2;
                                m.baseline_node_us = 70;
                                m.gpu_class = "cpu";
                              })));

  std::vector<v1::ReferenceTime> t = ReferenceTimesOf(newest_first, Problem1(), 25);
  REQUIRE(t.size() == 3);
  CHECK(t[0].world_size() == 2);
  CHECK(t[0].gpu_class() == "cpu");
  CHECK(t[0].median_us() == 70);
  CHECK(t[1].world_size() == 2);
  CHECK(t[1].gpu_class() == "h200");
  CHECK(t[1].samples() == 10);
  CHECK(t[1].median_us() == 15);  // nearest rank of 10..19
  CHECK(t[1].p10_us() == 11);
  CHECK(t[1].p90_us() == 18);
  CHECK(t[1].graph_median_us() == 2);
  CHECK(t[1].newest_micros() == 100000);
  CHECK(t[2].world_size() == 4);
  CHECK(t[2].median_us() == 30);
  CHECK(t[2].graph_median_us() == 0);

  // Only the newest `per_group` count: the three newest are 10, 11, 12.
  std::vector<v1::ReferenceTime> few = ReferenceTimesOf(newest_first, Problem1(), 3);
  CHECK(few[1].samples() == 3);
  CHECK(few[1].median_us() == 11);
}

TEST_CASE("ReferenceTimes: read from a SQLite store and kept for the TTL", "[reference_times]") {
  const std::string dir = *MakeTempDir("/tmp", "pkb-reftimes-test");
  {
    std::unique_ptr<JobStore> store = *SqliteJobStore::Open(dir + "/jobs.db");
    // Result i at W = 2 with this node baseline; `confirms`: a confirmation run of that job.
    auto add = [&](int i, double baseline_us, const std::string& confirms = "") {
      REQUIRE(store
                  ->CreateJob(Make(i, With([&](Made& m) {
                                     m.baseline_node_us = baseline_us;
                                     m.confirms = confirms;
                                   })),
                              nullptr)
                  .ok());
    };
    add(1, 12);
    add(2, 14);
    add(3, 99, "j1");
    ReferenceTimes cached(store.get(), absl::Hours(1));
    absl::StatusOr<std::vector<v1::ReferenceTime>> t = cached.Of(Problem1());
    REQUIRE(t.ok());
    REQUIRE(t->size() == 1);
    CHECK(t->at(0).samples() == 2);
    CHECK(t->at(0).p90_us() == 14);

    // A new result: the cached answer stands within the TTL; a fresh reader sees it.
    add(4, 16);
    CHECK(cached.Of(Problem1())->at(0).samples() == 2);
    ReferenceTimes fresh(store.get(), absl::ZeroDuration());
    CHECK(fresh.Of(Problem1())->at(0).samples() == 3);
    CHECK(fresh.Of(Problem1())->at(0).median_us() == 14);
  }
  RemoveTree(dir).IgnoreError();
}

}  // namespace
}  // namespace pkb
