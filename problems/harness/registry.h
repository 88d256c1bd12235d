// The registry of problems, filled at static-initialization time by PKB_REGISTER_PROBLEM.
#ifndef PKB_PROBLEMS_HARNESS_REGISTRY_H_
#define PKB_PROBLEMS_HARNESS_REGISTRY_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "problems/harness/problem.h"

namespace pkb {

// Every registered problem, ordered by id.
std::vector<const Problem*> AllProblems();

// The problem with this id, or NOT_FOUND naming the ids that exist.
absl::StatusOr<const Problem*> FindProblem(int id);

// Registers `p`; used by PKB_REGISTER_PROBLEM. Duplicate ids abort at start-up.
bool RegisterProblem(std::unique_ptr<Problem> p);

#define PKB_REGISTER_PROBLEM(Class)                           \
  static const bool pkb_registered_##Class [[maybe_unused]] = \
      ::pkb::RegisterProblem(std::make_unique<Class>())

}  // namespace pkb

#endif  // PKB_PROBLEMS_HARNESS_REGISTRY_H_
