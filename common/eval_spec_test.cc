#include "common/eval_spec.h"

#include <google/protobuf/util/message_differencer.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <filesystem>

#include "common/files.h"

namespace pkb {
namespace {

v1::EvalSpec Sample() {
  v1::EvalSpec s;
  s.set_problem_id(13);
  s.set_world_size(4);
  s.set_dtype("bf16");
  s.set_m(2048);
  s.set_warmup(0);  // explicit zero: not the default
  s.set_spot_checks(0);
  s.set_set_offset(77);
  s.set_functional(true);
  return s;
}

TEST_CASE("a spec file round-trips in every form", "[eval_spec]") {
  auto dir = MakeTempDir(std::filesystem::temp_directory_path().string(), "spec-");
  REQUIRE(dir.ok());
  v1::EvalSpec want = Sample();
  ApplyDefaults(&want);
  for (const char* name : {"spec.binpb", "spec.txtpb", "spec.json"}) {
    INFO(name);
    const std::string path = *dir + "/" + name;
    REQUIRE(WriteSpecFile(path, want).ok());
    auto got = ReadSpecFile(path);
    REQUIRE(got.ok());
    CHECK(google::protobuf::util::MessageDifferencer::Equals(*got, want));
    CHECK(got->has_warmup());  // an explicit zero survives
    CHECK(got->warmup() == 0);
  }
  REQUIRE(WriteFileAtomic(*dir + "/bad.txtpb", "no_such_field: 1").ok());
  CHECK(ReadSpecFile(*dir + "/bad.txtpb").status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(!ReadSpecFile(*dir + "/missing.binpb").ok());
  CHECK(RemoveTree(*dir).ok());
}

TEST_CASE("defaults are applied once and keep explicit values", "[eval_spec]") {
  v1::EvalSpec s;
  s.set_problem_id(1);
  s.set_world_size(2);
  ApplyDefaults(&s);
  CHECK(s.dtype() == "bfloat16");
  CHECK(s.m() == 1024);
  CHECK(s.n() == 1024);
  CHECK(s.language() == "cuda");
  CHECK(s.gpu_class() == "any");
  CHECK(s.trials() == 5);
  CHECK(s.warmup() == 500);
  CHECK(s.iters() == 100);
  CHECK(s.max_sets() == 10000);
  CHECK(s.min_window_ms() == 10);
  CHECK(TimedIterationsCap(s) == kMaxTimedIterations);
  v1::EvalSpec exact = s;
  exact.set_min_window_ms(0);
  CHECK(TimedIterationsCap(exact) == 100);  // PKB's count, exactly
  CHECK(s.l2_multiple() == 3.0);
  CHECK(s.spot_checks() == 3);
  CHECK(s.run_timeout_s() == 300);
  v1::EvalSpec again = s;
  ApplyDefaults(&again);
  CHECK(google::protobuf::util::MessageDifferencer::Equals(again, s));

  v1::EvalSpec e = Sample();
  ApplyDefaults(&e);
  CHECK(e.dtype() == "bfloat16");  // the alias resolved
  CHECK(e.m() == 2048);
  CHECK(e.warmup() == 0);
  CHECK(e.spot_checks() == 0);

  v1::EvalSpec cpp;
  cpp.set_language("cpp");
  ApplyDefaults(&cpp);
  CHECK(cpp.gpu_class() == "cpu");

  v1::ProblemSpec problem;
  problem.set_default_m(8192);
  problem.set_default_n(64);
  problem.set_default_dtype("float32");
  v1::EvalSpec p;
  ApplyDefaults(&p, &problem);
  CHECK(p.m() == 8192);
  CHECK(p.n() == 64);
  CHECK(p.dtype() == "float32");
}

TEST_CASE("the job key is a function of the completed spec", "[eval_spec]") {
  v1::EvalSpec implicit;
  implicit.set_problem_id(1);
  implicit.set_world_size(2);
  v1::EvalSpec explicit_defaults = implicit;
  explicit_defaults.set_trials(5);
  explicit_defaults.set_warmup(500);
  explicit_defaults.set_dtype("bf16");
  explicit_defaults.set_gpu_class("any");
  ApplyDefaults(&implicit);
  ApplyDefaults(&explicit_defaults);
  const std::string key = JobKey(implicit, "src", 1, "h1");
  CHECK(JobKey(explicit_defaults, "src", 1, "h1") == key);
  CHECK(JobKey(implicit, "src2", 1, "h1") != key);
  CHECK(JobKey(implicit, "src", 2, "h1") != key);
  CHECK(JobKey(implicit, "src", 1, "h2") != key);
  // Every keyed field changes it; the run timeout does not.
  auto differs = [&](auto change) {
    v1::EvalSpec s = implicit;
    change(&s);
    return JobKey(s, "src", 1, "h1") != key;
  };
  CHECK(differs([](v1::EvalSpec* s) { s->set_language("cpp"); }));
  CHECK(differs([](v1::EvalSpec* s) { s->set_gpu_class("h200"); }));
  CHECK(differs([](v1::EvalSpec* s) { s->set_trials(6); }));
  CHECK(differs([](v1::EvalSpec* s) { s->set_warmup(0); }));
  CHECK(differs([](v1::EvalSpec* s) { s->set_iters(7); }));
  CHECK(differs([](v1::EvalSpec* s) { s->set_max_sets(4); }));
  CHECK(differs([](v1::EvalSpec* s) { s->set_min_window_ms(0); }));
  CHECK(differs([](v1::EvalSpec* s) { s->set_l2_multiple(1.5); }));
  CHECK(differs([](v1::EvalSpec* s) { s->set_spot_checks(0); }));
  CHECK(differs([](v1::EvalSpec* s) { s->set_set_offset(9); }));
  CHECK(differs([](v1::EvalSpec* s) { s->set_functional(true); }));
  CHECK(differs([](v1::EvalSpec* s) { s->set_practice(true); }));
  CHECK(differs([](v1::EvalSpec* s) { s->set_m(512); }));
  CHECK_FALSE(differs([](v1::EvalSpec* s) { s->set_run_timeout_s(10); }));
}

TEST_CASE("about iters calls of a window carry events, however long the window") {
  // Up to iters calls: every one (PKB's per-iteration events).
  CHECK(TimerStride(100, 100) == 1);
  CHECK(TimedSamples(100, 100) == 100);
  CHECK(TimedSamples(7, 100) == 7);
  // Longer: every ceil(calls / iters)-th, from call 0.
  CHECK(TimerStride(101, 100) == 2);
  CHECK(TimedSamples(101, 100) == 51);  // calls 0, 2, ..., 100
  CHECK(TimerStride(1700, 100) == 17);
  CHECK(TimedSamples(1700, 100) == 100);
  CHECK(TimedSamples(10000, 100) == 100);
  CHECK(TimedSamples(9999, 100) == 100);  // stride 100: calls 0, 100, ..., 9900
  for (int calls = 1; calls <= 2000; ++calls) {
    INFO(calls);
    CHECK(TimedSamples(calls, 100) <= 100);
    CHECK(TimedSamples(calls, 100) >= std::min(calls, 51));
  }
  CHECK(TimedSamples(0, 100) == 0);
  CHECK(MarkedCalls(1700, 17) == 100);
  CHECK(MarkedCalls(5, 0) == 5);  // below 1: every call
  CHECK(MarkedCalls(0, 3) == 0);
}

}  // namespace
}  // namespace pkb
