#include "worker/engine/compiler.h"

#include <utime.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <thread>

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

TEST_CASE("the compile key: torch's folders for ATen glue and every API header", "[compiler]") {
  namespace fs = std::filesystem;
  auto dir = MakeTempDir("/tmp/pkb-test", "compiler-key-");
  REQUIRE(dir.ok());
  fs::create_directories(*dir + "/torch");
  fs::copy(std::string(PKB_SOURCE_DIR) + "/include", *dir + "/include",
           fs::copy_options::recursive);
  CompilerOptions with_torch = Options(*dir);
  with_torch.api_include_dir = *dir + "/include";
  with_torch.torch_include_dir = *dir + "/torch";
  CompilerOptions without_torch = with_torch;
  without_torch.torch_include_dir.clear();
  CandidateCompiler a(with_torch), b(without_torch);
  auto key = [](CandidateCompiler& c, const std::string& source) {
    auto k = c.Key(source, "k.cc");  // the host compiler's key (no nvcc needed)
    INFO(k.status().message());
    REQUIRE(k.ok());
    return *k;
  };
  // A source that uses ATen through either glue header is compiled with torch's folders (they
  // are in its flags, hence its key); one that does not is compiled without them.
  for (const char* glue : {"#include <pkb/aten_core.h>\n", "#include \"pkb/aten.h\"\n",
                           "#include <ATen/ops/matmul.h>\n"}) {
    INFO(glue);
    CHECK(key(a, glue) != key(b, glue));
  }
  const std::string plain = "#include <pkb/candidate.h>\n";
  CHECK(key(a, plain) == key(b, plain));
  // A change of any header of the candidate API compiles every source again.
  for (const char* h : {"candidate.h", "device.cuh", "aten_core.h", "aten.h"}) {
    INFO(h);
    const std::string path = *dir + "/include/pkb/" + h;
    const std::string before = key(b, plain);
    auto text = ReadFile(path);
    REQUIRE(text.ok());
    REQUIRE(WriteFileAtomic(path, *text + "\n// changed\n").ok());
    CHECK(key(b, plain) != before);
    REQUIRE(WriteFileAtomic(path, *text).ok());
    CHECK(key(b, plain) == before);
  }
  (void)RemoveTree(*dir);
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
  // Kept: the same source is answered from the cache, with the same diagnostics, in the name
  // this submission gives it.
  auto again = c.Compile(*src, "other_name.cu");
  REQUIRE(again.ok());
  CHECK(again->report.cache_hit());
  CHECK_FALSE(again->report.ok());
  CHECK(again->library_path.empty());
  REQUIRE(again->report.diagnostics_size() == r->report.diagnostics_size());
  CHECK(again->report.diagnostics(0).line() == 14);
  CHECK(again->report.diagnostics(0).file() == "other_name.cu");
  CHECK(again->report.log().find("other_name.cu(14)") != std::string::npos);
  CHECK(again->report.log().find("broken.cu") == std::string::npos);
  (void)RemoveTree(*dir);
}

TEST_CASE("host compiles: an error is kept, a timeout is not, and one key compiles at a time",
          "[compiler]") {
  auto dir = MakeTempDir("/tmp/pkb-test", "compiler-");
  REQUIRE(dir.ok());
  CandidateCompiler c(Options(*dir));
  const std::string broken = "int pkb_init() { return undeclared; }\n";
  auto first = c.Compile(broken, "k.cc");
  REQUIRE(first.ok());
  CHECK_FALSE(first->report.ok());
  CHECK_FALSE(first->report.cache_hit());
  auto second = c.Compile(broken, "k.cc");
  REQUIRE(second.ok());
  CHECK_FALSE(second->report.ok());
  CHECK(second->report.cache_hit());
  REQUIRE(second->report.diagnostics_size() >= 1);
  CHECK(second->report.diagnostics(0).severity() == "error");
  // A kept error answers for an hour: an older one compiles again.
  int kept = 0;
  for (const auto& e : std::filesystem::directory_iterator(*dir + "/cache")) {
    if (e.path().extension() != ".error") continue;
    const struct utimbuf old_times = {time(nullptr) - 7200, time(nullptr) - 7200};
    REQUIRE(utime(e.path().c_str(), &old_times) == 0);
    ++kept;
  }
  CHECK(kept == 1);
  auto later = c.Compile(broken, "k.cc");
  REQUIRE(later.ok());
  CHECK_FALSE(later->report.ok());
  CHECK_FALSE(later->report.cache_hit());

  // A compiler stopped by its limit says nothing about the source: compiled again next time.
  CompilerOptions slow_options = Options(*dir);
  slow_options.timeout = absl::Milliseconds(1);
  CandidateCompiler slow(slow_options);
  const std::string fine = "extern \"C\" int answer() { return 42; }\n";
  auto cut = slow.Compile(fine, "fine.cc");
  REQUIRE(cut.ok());
  CHECK_FALSE(cut->report.ok());
  auto full = c.Compile(fine, "fine.cc");
  REQUIRE(full.ok());
  CHECK(full->report.ok());
  CHECK_FALSE(full->report.cache_hit());

  // Two compiles of one new source at once: one compiles, the other waits and hits the cache.
  const std::string other = "extern \"C\" int other() { return 7; }\n";
  absl::StatusOr<CompileOutput> a, b;
  std::thread ta([&] { a = c.Compile(other, "other.cc"); });
  std::thread tb([&] { b = c.Compile(other, "other.cc"); });
  ta.join();
  tb.join();
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->report.ok());
  CHECK(b->report.ok());
  CHECK(a->report.cache_hit() != b->report.cache_hit());
  (void)RemoveTree(*dir);
}

}  // namespace
}  // namespace pkb
