// What every registered problem declares agrees with what it does: its world sizes with
// CanImplement, its seed sentence with Seed, its embedded source with its file.
#include "problems/harness/registry.h"

#include <catch2/catch.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "problems/harness/inputs.h"
#include "problems/harness/problem_sources.h"
#include "problems/harness/seed_text.h"

namespace pkb {
namespace {

TEST_CASE("every problem's world sizes are those it runs at, at the default shape") {
  for (const Problem* p : AllProblems()) {
    std::vector<int> runs;
    for (int w : {1, 2, 4, 8}) {
      RunConfig cfg;
      cfg.world = w;
      if (CheckRunnable(*p, cfg).ok()) runs.push_back(w);
    }
    INFO("problem " << p->info().id);
    CHECK(p->WorldSizes() == runs);
  }
}

TEST_CASE("the seed sentence follows Seed") {
  const Problem* per_rank = *FindProblem(13);
  CHECK(SeedText(*per_rank).find("42 + 13000 + r + 1000003*set.") != std::string::npos);
  const Problem* shared = *FindProblem(40);
  CHECK(SeedText(*shared).find("42 + 40000 + 1000003*set, the same seed on every rank") !=
        std::string::npos);
  for (const Problem* p : AllProblems()) {
    INFO("problem " << p->info().id);
    const std::string full = FullStatement(*p);
    CHECK(full.rfind("\n- Seeds: ") == full.size() - SeedText(*p).size() - 1);
  }
}

TEST_CASE("every problem's source is its own file and the family libraries it includes") {
  for (const Problem* p : AllProblems()) {
    const int id = p->info().id;
    INFO("problem " << id);
    std::vector<EmbeddedSource> files = ProblemSources(id);
    REQUIRE(!files.empty());
    CHECK(absl::StrContains(files[0].path, absl::StrFormat("/p%03d_", id)));
    // The reference is in its file, or in the family library it is written over (41, 42 and the
    // MoE pipelines).
    bool has_reference = false;
    for (const EmbeddedSource& f : files) has_reference |= absl::StrContains(f.text, "Reference(");
    CHECK(has_reference);
    CHECK(absl::StrContains(files[0].text, "PKB_REGISTER_PROBLEM("));
    for (const EmbeddedSource& f : files) CHECK(!absl::StartsWith(f.path, "problems/harness/"));
  }
  // Problem 41 (ZeRO-1) is written over two family libraries, Adam's and ZeRO's, in the order of
  // its #include lines.
  std::vector<std::string> paths;
  for (const EmbeddedSource& f : ProblemSources(41)) paths.emplace_back(f.path);
  CHECK(paths == std::vector<std::string>{"problems/dp/p041_zero1_optimizer_shard.cc",
                                          "problems/dp/adam.h", "problems/dp/adam.cc",
                                          "problems/dp/zero.h", "problems/dp/zero.cc"});
  CHECK(ProblemSources(999).empty());
}

}  // namespace
}  // namespace pkb
