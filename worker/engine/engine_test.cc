// The engine's decisions before anything runs: whether W fits the node's GPUs (the count is
// injected: CI has no GPU), and what an incomplete installation answers.
#include "worker/engine/engine.h"

#include <catch2/catch.hpp>

#include "common/eval_spec.h"
#include "common/harness_version.h"

namespace pkb {
namespace {

TEST_CASE("W must fit the node's GPUs, one per rank", "[engine]") {
  CHECK(CheckWorldFitsGpus(1, 1).ok());
  CHECK(CheckWorldFitsGpus(4, 8).ok());
  CHECK(CheckWorldFitsGpus(8, 8).ok());
  // No GPU at all: the engine compiles, then answers NO_DEVICE, as before.
  CHECK(CheckWorldFitsGpus(2, 0).ok());
  absl::Status one = CheckWorldFitsGpus(2, 1);
  CHECK(one.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(one.message()).find("W=2 needs 2 GPUs") != std::string::npos);
  CHECK(std::string(one.message()).find("has 1 usable GPU ") != std::string::npos);
  absl::Status four = CheckWorldFitsGpus(8, 4);
  CHECK(std::string(four.message()).find("W=8") != std::string::npos);
  CHECK(std::string(four.message()).find("4 usable GPUs") != std::string::npos);
}

// A CUDA job on an installation that lacks `missing`: the verdict, and whether it compiled.
v1::EvalResult RunWithout(const std::string& missing, bool* compiled) {
  EvalOptions o;
  o.spec.set_problem_id(1);
  o.spec.set_world_size(2);
  o.spec.set_m(64);
  o.spec.set_n(64);
  o.source = "#include <pkb/candidate.h>\nPKB_CANDIDATE_API_V1;\n";
  o.source_name = "k.cu";
  o.backend = "cuda";
  o.sandbox = "on";
  o.scratch_root = "/tmp/pkb-test";
  o.api_include_dir = std::string(PKB_SOURCE_DIR) + "/include";
  o.rank_binary = "/bin/true";  // runs, and counts no GPU
  o.group_binary = "/bin/true";
  if (missing == "headers") o.api_include_dir = "/nonexistent/include";
  if (missing == "no headers") o.api_include_dir = "";
  if (missing == "rank") o.rank_binary = "/nonexistent/bin/pkb-rank";
  if (missing == "group") o.group_binary = "/nonexistent/bin/pkb-rank-group";
  *compiled = false;
  return RunEvaluation(o, [&](const v1::EvalEvent& e) { *compiled |= e.stage() == v1::COMPILING; });
}

TEST_CASE("an incomplete installation fails at once, naming what is missing", "[engine]") {
  struct Case {
    const char* missing;
    const char* named;
  } cases[] = {
      {"group", "/nonexistent/bin/pkb-rank-group"},
      {"rank", "/nonexistent/bin/pkb-rank"},
      {"headers", "no pkb/candidate.h in '/nonexistent/include'"},
      {"no headers", "include/pkb/candidate.h in the folders above"},
  };
  for (const Case& c : cases) {
    bool compiled = true;
    v1::EvalResult r = RunWithout(c.missing, &compiled);
    INFO(c.missing << ": " << r.message());
    CHECK(r.status() == v1::INTERNAL);
    CHECK(r.message().find("this node's engine is incomplete") != std::string::npos);
    CHECK(r.message().find(c.named) != std::string::npos);
    CHECK_FALSE(compiled);
  }
  // pkb-rank-group serves sandboxed GPU runs only: a CPU candidate does not need it.
  EvalOptions cpu;
  cpu.source = "int x;\n";
  cpu.source_name = "k.cc";
  cpu.rank_binary = "/bin/true";
  cpu.group_binary = "/nonexistent/bin/pkb-rank-group";
  cpu.api_include_dir = std::string(PKB_SOURCE_DIR) + "/include";
  CHECK(CheckInstallation(cpu, "cpu").ok());
  cpu.sandbox = "off";
  CHECK(CheckInstallation(cpu, "cuda").ok());
}

TEST_CASE("the engine keys a job by its completed spec unless given the key", "[engine]") {
  EvalOptions o;
  o.spec.set_problem_id(1);
  o.spec.set_world_size(2);
  o.source = "same text";
  o.source_name = "candidate.cu";
  const std::string cuda = JobKey(o, 1);
  v1::EvalSpec completed = o.spec;
  completed.set_language("cuda");
  ApplyDefaults(&completed);
  CHECK(cuda == pkb::JobKey(completed, "same text", 1, HarnessVersion()));
  CHECK(CompletedSpec(o).trials() == completed.trials());
  o.source_name = "candidate.cc";  // the name of a "cpp" job's source
  CHECK(JobKey(o, 1) != cuda);
  CHECK(CompletedSpec(o).gpu_class() == "cpu");
  o.job_key = "from the lease";
  CHECK(JobKey(o, 1) == "from the lease");
}

TEST_CASE("the text report gives the candidate's rounds beside their median", "[engine]") {
  v1::EvalResult r;
  r.set_status(v1::OK);
  v1::Timing* c = r.mutable_candidate();
  c->set_samples(40);
  c->set_iterations(8);
  c->set_wall_per_iter_us(5.05);
  for (double x : {5.05, 4.97, 5.11, 5.06, 5.04}) c->add_round_wall_per_iter_us(x);
  const std::string text = FormatReport(r);
  INFO(text);
  CHECK(text.find("candidate 5.05 us per call on the judge's clock (median of 5 rounds: 5.05, "
                  "4.97, 5.11, 5.06, 5.04 us; windows of 8 calls)") != std::string::npos);
}

}  // namespace
}  // namespace pkb
