// Problem 42 — DeepSpeed ZeRO stage 2: as ZeRO-1, but the gradient is reduce-scattered straight
// into each rank's slice, so no rank holds the full averaged gradient.
#include "absl/strings/str_cat.h"
#include "problems/dp/adam.h"
#include "problems/dp/zero.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

class Zero2 : public dp::ZeroProblem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        42,
        "42_zero2_optimizer_shard_grad",
        1,
        "DeepSpeed ZeRO stage 2 (gradients sharded too)",
        "ZeRO",
        "One ZeRO-2 step of a two-layer MLP: the parameters are broadcast from rank 0, the\n"
        "gradient is reduce-scattered into each rank's slice and averaged, rank r runs Adam on\n"
        "its slice of the flat parameters with its own moment shards, and the updated slices\n"
        "are all-gathered.\n\n" +
            std::string(dp::kShardedSizes) + dp::kZeroInputs +
            "- Computation (PKB's, every op in the run dtype; the inputs are not modified):\n"
            "  1. Broadcast the flattened [W1, b1, W2, b2] (P elements) from rank 0.\n"
            "  2. The MLP's MSE forward and backward on this rank's rows, as in problem 40\n"
            "     (autograd in the dtype); flatten the gradients in the same order.\n"
            "  3. reduce_scatter_tensor SUM over WORLD: rank r receives elements\n"
            "     [r P/W, (r+1) P/W) of the summed flat gradient (the slice ignores tensor\n"
            "     boundaries); divide by W.\n"
            "  4. Adam on rank r's slice of the flat parameters, on copies of its moment shards:\n" +
            dp::kAdamFormula +
            "  5. all_gather_into_tensor of the updated slices, unflattened into W1..b2.\n"
            "- Outputs (6, run dtype): W1', b1', W2', b2' (identical on all ranks), then this\n"
            "  rank's `exp_avg_part`, `exp_avg_sq_part` (P/W).\n" +
            dp::kStepTolerances +
            "- Traffic: broadcast P, reduce-scatter P, all-gather P elements; forward and\n"
            "  backward ~6 c (d_in hid + hid d_out) FLOPs per rank; Adam ~12 P/W."};
    return i;
  }

  absl::StatusOr<at::Tensor> AveragedSlice(Comm& comm, at::Tensor grad) const override {
    at::Tensor slice = at::empty({grad.numel() / comm.size()}, grad.options());
    PKB_RETURN_IF_ERROR(comm.ReduceScatterInto(slice, grad, ReduceOp::kSum));
    return slice.div_(static_cast<int64_t>(comm.size()));
  }

  double ReduceFactor(int world) const override { return AllGatherFactor(world); }
};
PKB_REGISTER_PROBLEM(Zero2);

}  // namespace
}  // namespace pkb
