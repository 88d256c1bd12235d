// What problems 41 (ZeRO-1) and 42 (ZeRO-2) share: the inputs, the step on this rank's slice of
// the flat parameters, the all-gather back, the oracle and the tolerances. They differ only in
// how the averaged gradient slice is made (all-reduce then slice, or reduce-scatter).
#ifndef PKB_PROBLEMS_DP_ZERO_H_
#define PKB_PROBLEMS_DP_ZERO_H_

#include "problems/dp/adam.h"

namespace pkb::dp {

class ZeroProblem : public Problem {
 public:
  // Problems 41 and 42: N = 256. At N = 64 the biases have 8-32 elements, and a
  // missing Adam step hides in bf16 wherever |p| > 2 lr / 2u ~ 0.13, so too few elements would
  // show it; N = 256 gives d_in 256, hid 128, d_out 64.
  TestShape CpuTestShape() const override { return {64, 256}; }

  // This rank's slice of the flat gradient summed over WORLD and divided by W.
  virtual absl::StatusOr<at::Tensor> AveragedSlice(Comm& comm, at::Tensor grad) const = 0;
  // The bus-bandwidth factor of that reduction.
  virtual double ReduceFactor(int world) const = 0;

  // PKB draws every rank's inputs from the shared seed 42 + 1000 id + 1000003 set (rank 0's).
  uint64_t Seed(int rank, int set) const override { return Problem::Seed(0, set); }

  absl::Status CanImplement(const RunConfig& cfg) const override;
  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override;
  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override;
  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override;
  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override;
  Tolerance GetTolerance(const RunConfig& cfg, int index) const override;

  // From zero moments the step is lr * sign(g): the averaged gradient without one rank mostly
  // keeps its sign, so the parameters cannot show a missing rank; the moment shards carry it.
  bool RankMissingDetectable(const RunConfig& cfg, int set, int index) const override {
    return index >= 4;
  }

  Roofline GetRoofline(const RunConfig& cfg) const override;
};

}  // namespace pkb::dp

#endif  // PKB_PROBLEMS_DP_ZERO_H_
