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
        R"md(One ZeRO-2 step of a two-layer MLP: the parameters are broadcast from rank 0, the
gradient is reduce-scattered into each rank's slice and averaged, rank r runs Adam on
its slice of the flat parameters with its own moment shards, and the updated slices
are all-gathered.

)md" + std::string(dp::kShardedSizes) +
            dp::kZeroInputs + std::string(dp::kZeroForwardSteps) +
            R"md(  3. reduce_scatter_tensor SUM over WORLD: rank r receives elements
     [r P/W, (r+1) P/W) of the summed flat gradient (the slice ignores tensor
     boundaries); divide by W.
  4. Adam on rank r's slice of the flat parameters, on copies of its moment shards:
)md" + dp::kAdamFormula +
            R"md(  5. all_gather_into_tensor of the updated slices, unflattened into W1..b2.
- Outputs (6, run dtype): W1', b1', W2', b2' (identical on all ranks), then this
  rank's `exp_avg_part`, `exp_avg_sq_part` (P/W).
)md" + dp::kStepTolerances +
            R"md(- Traffic: broadcast P, reduce-scatter P, all-gather P elements; forward and
  backward ~6 c (d_in hid + hid d_out) FLOPs per rank; Adam ~12 P/W.)md"};
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
