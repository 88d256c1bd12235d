// What every registered problem declares agrees with what it does: its world sizes with
// CanImplement, its seed sentence with Seed.
#include "problems/harness/registry.h"

#include <catch2/catch.hpp>

#include "problems/harness/inputs.h"
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

}  // namespace
}  // namespace pkb
