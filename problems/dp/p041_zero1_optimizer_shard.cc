// Problem 41 — DeepSpeed ZeRO stage 1: the optimizer state is sharded. Every rank averages the
// full gradient (all-reduce), steps its own slice of the flat parameters with its own moments,
// and the slices are all-gathered back into the parameters.
#include "absl/strings/str_cat.h"
#include "problems/dp/adam.h"
#include "problems/dp/zero.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

class Zero1 : public dp::ZeroProblem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        41,
        "41_zero1_optimizer_shard",
        1,
        "DeepSpeed ZeRO stage 1 (optimizer state sharded)",
        "ZeRO",
        R"md(One ZeRO-1 step of a two-layer MLP: the parameters are broadcast from rank 0, the
gradient is all-reduced and averaged, rank r runs Adam on its slice of the flat
parameters with its own moment shards, and the updated slices are all-gathered.

)md" + std::string(dp::kShardedSizes) +
            dp::kZeroInputs + std::string(dp::kZeroForwardSteps) +
            R"md(  3. All-reduce SUM over WORLD, then divide by W.
  4. Rank r takes elements [r P/W, (r+1) P/W) of the flat gradient and of the flat
     parameters (the slice ignores tensor boundaries) and runs Adam on copies of its
     moment shards:
)md" + dp::kAdamFormula +
            R"md(  5. all_gather_into_tensor of the updated slices, unflattened into W1..b2.
- Outputs (6, run dtype): W1', b1', W2', b2' (identical on all ranks), then this
  rank's `exp_avg_part`, `exp_avg_sq_part` (P/W).
)md" + dp::kStepTolerances +
            R"md(- Traffic: broadcast P, all-reduce P, all-gather P elements; forward and backward
  ~6 c (d_in hid + hid d_out) FLOPs per rank; Adam ~12 P/W.)md"};
    return i;
  }

  absl::StatusOr<at::Tensor> AveragedSlice(Comm& comm, at::Tensor grad) const override {
    PKB_RETURN_IF_ERROR(comm.AllReduce(grad, ReduceOp::kSum));
    grad.div_(static_cast<int64_t>(comm.size()));
    const int64_t part = grad.numel() / comm.size();
    return grad.narrow(0, comm.rank() * part, part).contiguous();
  }

  double ReduceFactor(int world) const override { return AllReduceFactor(world); }
};
PKB_REGISTER_PROBLEM(Zero1);

}  // namespace
}  // namespace pkb
