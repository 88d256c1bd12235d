// Outputs with more than one correct answer: the order of equal keys in a sort or a top-k, which
// of the keys equal to the k-th enter a top-k, the rank of a key among equal ones. PKB's Python
// references leave these to torch.sort / torch.topk (unstable, implementation-defined), so a
// candidate that makes another valid choice is correct and must pass.
//
// A problem whose outputs depend on such a choice implements TieRule beside Problem:
//
//   class Knn : public Problem, public TieRule { ... };
//
// and the harness (CompareOutputs below) lets the candidate make any valid choice: before the
// element-wise comparison, ResolveTies replaces every choice of the candidate's that is valid by
// the reference's own, and leaves everything else as the candidate wrote it, so that the
// tolerance still judges values, wrong members, poison and NaN as for any problem.
//
// What that needs beyond the reference's outputs (how many keys tie the k-th and which, the
// range of ranks a key may take) can depend on other ranks' inputs: TieKeys computes it with
// collectives, in verification only (never timed), on every rank together right after
// Reference; OracleTieKeys computes the same in one process (the CPU tests hold one to the
// other at W = 1, 2, 4, 8, as Reference to Oracle).
//
// Thread-safety: as Problem, every method is const.
#ifndef PKB_PROBLEMS_HARNESS_TIES_H_
#define PKB_PROBLEMS_HARNESS_TIES_H_

#include <ATen/ATen.h>

#include <vector>

#include "absl/status/statusor.h"
#include "pkb/v1/check.pb.h"
#include "problems/harness/comm.h"
#include "problems/harness/problem.h"

namespace pkb {

class TieRule {
 public:
  virtual ~TieRule() = default;

  // This rank's keys for input set `in`, given the reference's outputs `expected` on this rank.
  // Collective over WORLD (every rank calls it, in the same order as Reference).
  virtual absl::StatusOr<std::vector<at::Tensor>> TieKeys(
      Comm& comm, const Inputs& in, const RunConfig& cfg,
      const std::vector<at::Tensor>& expected) const = 0;

  // The same keys for every rank, from every rank's inputs and the oracle's outputs.
  virtual absl::StatusOr<std::vector<std::vector<at::Tensor>>> OracleTieKeys(
      const std::vector<Inputs>& all, const RunConfig& cfg,
      const std::vector<std::vector<at::Tensor>>& expected) const = 0;

  // `actual` (the candidate's outputs, declared shapes) with each valid tie choice replaced by
  // the reference's; the reference's own outputs map onto themselves. Never turns an invalid
  // value (another member, poison, NaN) into a valid one.
  virtual absl::StatusOr<std::vector<at::Tensor>> ResolveTies(
      const RunConfig& cfg, const std::vector<at::Tensor>& expected,
      const std::vector<at::Tensor>& keys, const std::vector<at::Tensor>& actual) const = 0;
};

// CompareOutputs (check.h) after mapping the candidate's valid tie choices onto the reference's
// with `tie_keys`, this rank's TieKeys for the same inputs. The harness compares every problem
// through this one; check.h's, without keys, refuses a problem that has a tie rule.
absl::StatusOr<std::vector<v1::OutputCheck>> CompareOutputs(
    const Problem& p, const RunConfig& cfg, const std::vector<OutputDecl>& decls,
    const std::vector<at::Tensor>& actual, const std::vector<at::Tensor>& expected,
    int poison_variant, const std::vector<at::Tensor>& tie_keys);

// The problem's tie rule, or nullptr where ties cannot change its outputs.
inline const TieRule* TieRuleOf(const Problem& p) { return dynamic_cast<const TieRule*>(&p); }

// TieKeys where the problem has a tie rule, else no keys (and no collective).
inline absl::StatusOr<std::vector<at::Tensor>> TieKeysOf(const Problem& p, Comm& comm,
                                                         const Inputs& in, const RunConfig& cfg,
                                                         const std::vector<at::Tensor>& expected) {
  const TieRule* rule = TieRuleOf(p);
  if (rule == nullptr) return std::vector<at::Tensor>{};
  return rule->TieKeys(comm, in, cfg, expected);
}

}  // namespace pkb

#endif  // PKB_PROBLEMS_HARNESS_TIES_H_
