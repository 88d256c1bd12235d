#include "problems/harness/registry.h"

#include <cstdio>
#include <cstdlib>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pkb {
namespace {

std::map<int, std::unique_ptr<Problem>>& Registry() {
  static auto* r = new std::map<int, std::unique_ptr<Problem>>;
  return *r;
}

}  // namespace

bool RegisterProblem(std::unique_ptr<Problem> p) {
  int id = p->info().id;
  if (Registry().count(id)) {
    std::fprintf(stderr, "pkb: problem %d registered twice\n", id);
    std::abort();
  }
  Registry()[id] = std::move(p);
  return true;
}

std::vector<const Problem*> AllProblems() {
  std::vector<const Problem*> out;
  for (const auto& [id, p] : Registry()) out.push_back(p.get());
  return out;
}

absl::StatusOr<const Problem*> FindProblem(int id) {
  auto it = Registry().find(id);
  if (it != Registry().end()) return it->second.get();
  std::vector<int> ids;
  for (const auto& [i, p] : Registry()) ids.push_back(i);
  return absl::NotFoundError(absl::StrCat("unknown problem ", id, "; this harness has problems ",
                                          absl::StrJoin(ids, ", ")));
}

}  // namespace pkb
