// The engine's decisions before anything runs: what an incomplete installation answers.
#include "worker/engine/engine.h"

#include <catch2/catch.hpp>

namespace pkb {
namespace {

// A CUDA job on an installation that lacks `missing`: the verdict, and whether it compiled.
v1::EvalResult RunWithout(const std::string& missing, bool* compiled) {
  EvalOptions o;
  o.problem = 1;
  o.world = 2;
  o.m = o.n = 64;
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

}  // namespace
}  // namespace pkb
