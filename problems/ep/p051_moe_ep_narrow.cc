// Problem 51 — narrow expert-parallel MoE forward ("DP over EP"): E experts, one per rank, inside
// contiguous EP blocks of E ranks; every collective stays inside the block.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "problems/ep/moe_pipeline.h"
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

class MoeEpNarrow : public MoeEpProblem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        51,
        "51_moe_ep_narrow",
        2,
        "VeOmni EP MoE forward over EP sub-groups (DP over EP)",
        "expert parallel",
        R"md(Expert-parallel MoE forward inside EP blocks. E = the largest divisor of W in
[2, floor(W/2)], or 1 if there is none (W = 8: 4, W = 4: 2, W = 6: 3; W in {1, 2, 3,
5, 7}: 1); top_k = min(2, E). Any W.

- Groups: at W = 1 the EP group is WORLD; otherwise the group "ep" splits WORLD into
  the contiguous blocks {g E, ..., g E + E - 1} (W = 8: {0..3}, {4..7}; W = 2: {0}, {1}).
  Each rank hosts one expert: expert e of block g lives on global rank g E + e. The
  counts all-gather and both all-to-alls run inside the block; blocks never talk.
- Inputs per rank r, in call order. On the device,
  randn in the run dtype, in this order: `hidden_states` x (M, N); `gate_weight` Wg
  (E, N); `gate_bias` bg (E). Then three default nn.Linear built on the CPU in fp32
  from the CPU generator (weight (out, in) by kaiming_uniform(a = sqrt(5)), i.e.
  U(-1/sqrt(in), 1/sqrt(in)), then bias (out) from the same range), cast to the dtype
  and moved to the device: `gate_proj` N -> 128, `up_proj` N -> 128, `down_proj`
  128 -> N, each passed as its weight and bias. Scalars: num_experts = E, top_k.
  Every rank's tensors differ.
- Computation (the EP pipeline of 31, over the block): logits = x Wg^T + bg in dtype;
  p = softmax in dtype; (w, sel) = topk(p, top_k) (no renormalization). Counts per
  expert all-gathered over the block into (E, E); pairs (e, t) expert-major, ascending
  t; rows sent with all_to_all_single (variable splits) to block rank e; Y =
  down(silu(gate(X)) * up(X)), every op rounded to dtype; rows sent back, row (e, t)
  times p[t, e] (dtype) and scatter-added into zeros (M, N) dtype at row t.
  Closed form: out[t] = sum_j w[t,j] * MLP_{g E + sel[t,j]}(x[t]). With E = 1 nothing
  is communicated and out = 1.0 * MLP_r(x) (softmax of one logit is exactly 1).
- Output: `out` (M, N) dtype. Split sizes depend on the data.
)md" + std::string(kMoeTiesText) +
            R"md(- Numerics: routing must be computed exactly as above (dtype logits, softmax, topk:
  it decides the destination). The MLP and combine may use fp32 intermediates:
  |out| <~ 1, and PKB's atol = rtol = 1e-2 admits that.
- Traffic per rank: dispatch and combine ~ (E-1)/E * 2 M N b bytes each (inside the
  block); an all-gather of E int64 counts. FLOPs: router 2 M N E, experts 6 R N 128.)md"};
    return i;
  }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    return RequirePositiveShape(cfg);
  }

  // PKB's _moe_narrow_num_experts: the largest E in [2, W/2] dividing W, else 1.
  int64_t NumExperts(int world) const override {
    for (int e = world / 2; e > 1; --e) {
      if (world % e == 0) return e;
    }
    return 1;
  }
  int64_t TopK(int world) const override { return std::min<int64_t>(2, NumExperts(world)); }
  // One expert per rank: the EP block has E ranks (WORLD when E >= W, i.e. W = 1).
  int EpSize(int world) const override {
    return static_cast<int>(std::min<int64_t>(NumExperts(world), world));
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    Tolerance t;
    t.rationale =
        "PKB's atol = rtol = 1e-2. |out| <~ 1 and each token sums at most two dtype-rounded "
        "products (exact and order-free); fp32 MLP and combine intermediates stay well inside it "
        "(as measured for 31, which has the same pipeline). Routing has no tolerance beyond ties "
        "(any expert tied at the k-th value passes): a token "
        "sent to another rank's MLP, or to the other block's, is wrong by ~100%.";
    return t;
  }
};
PKB_REGISTER_PROBLEM(MoeEpNarrow);

}  // namespace
}  // namespace pkb
