#include "worker/engine/compiler.h"

#include <catch2/catch.hpp>
#include <filesystem>

#include "common/files.h"

namespace pkb {
namespace {

CompilerOptions Options(const std::string& dir) {
  CompilerOptions o;
  o.api_include_dir = std::string(PKB_SOURCE_DIR) + "/include";
  o.cache_dir = dir + "/cache";
  o.scratch_dir = dir + "/scratch";
  return o;
}

TEST_CASE("nvcc and gcc diagnostics keep file and line", "[compiler]") {
  std::string log =
      "/tmp/x/candidate.cu(12): error: identifier \"foo\" is undefined\n"
      "noise\n"
      "/tmp/x/candidate.cu:7:3: warning: unused variable 'y' [-Wunused-variable]\n";
  auto d = CandidateCompiler::ParseDiagnostics(log, "/tmp/x/candidate.cu", "k.cu");
  REQUIRE(d.size() == 2);
  CHECK(d[0].file() == "k.cu");
  CHECK(d[0].line() == 12);
  CHECK(d[0].severity() == "error");
  CHECK(d[0].message() == "identifier \"foo\" is undefined");
  CHECK(d[1].line() == 7);
  CHECK(d[1].column() == 3);
  CHECK(d[1].severity() == "warning");
}

TEST_CASE("a real nvcc compile produces a library, then hits the cache", "[compiler][nvcc]") {
  auto dir = MakeTempDir("/tmp/pkb-test", "compiler-");
  REQUIRE(dir.ok());
  CandidateCompiler c(Options(*dir));
  auto src = ReadFile(std::string(PKB_SOURCE_DIR) + "/problems/examples/p001_allreduce_symm.cu");
  REQUIRE(src.ok());
  auto first = c.Compile(*src, "p001_allreduce_symm.cu");
  REQUIRE(first.ok());
  INFO(first->report.log());
  CHECK(first->report.ok());
  CHECK_FALSE(first->report.cache_hit());
  CHECK(std::filesystem::exists(first->library_path));
  auto second = c.Compile(*src, "p001_allreduce_symm.cu");
  REQUIRE(second.ok());
  CHECK(second->report.cache_hit());
  CHECK(second->library_path == first->library_path);
  // Any change of the source compiles again.
  auto third = c.Compile(*src + "\n// changed\n", "p001_allreduce_symm.cu");
  REQUIRE(third.ok());
  CHECK_FALSE(third->report.cache_hit());
  (void)RemoveTree(*dir);
}

TEST_CASE("a broken source gives COMPILE diagnostics with the submission's name",
          "[compiler][nvcc]") {
  auto dir = MakeTempDir("/tmp/pkb-test", "compiler-");
  REQUIRE(dir.ok());
  CandidateCompiler c(Options(*dir));
  auto src = ReadFile(std::string(PKB_SOURCE_DIR) + "/problems/examples/p001_allreduce_broken.cu");
  REQUIRE(src.ok());
  auto r = c.Compile(*src, "broken.cu");
  REQUIRE(r.ok());
  CHECK_FALSE(r->report.ok());
  REQUIRE(r->report.diagnostics_size() >= 1);
  CHECK(r->report.diagnostics(0).file() == "broken.cu");
  CHECK(r->report.diagnostics(0).line() == 14);
  CHECK(r->report.diagnostics(0).message().find("undeclared_status") != std::string::npos);
  CHECK(r->report.log().find("/tmp/") == std::string::npos);  // no scratch paths leak
  (void)RemoveTree(*dir);
}

}  // namespace
}  // namespace pkb
