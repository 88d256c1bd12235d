// Problem 50 — wide expert-parallel MoE forward: two experts per rank (E = 2W), top-2, over
// WORLD; a token whose two experts share a rank is processed there twice.
#include "absl/strings/str_cat.h"
#include "problems/ep/moe_pipeline.h"
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

class MoeEpWide : public MoeEpProblem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        50,
        "50_moe_ep_wide",
        2,
        "VeOmni EP MoE forward (token_pre_all2all / tokens_post_all2all)",
        "expert parallel",
        R"md(Expert-parallel MoE forward over WORLD with two experts per rank: E = 2W experts,
top_k = 2, L = 2 (rank d hosts experts 2d and 2d + 1). Any W (W = 1: no all-to-all).

- Inputs per rank r, in call order. On the device,
  randn in the run dtype, in this order: `hidden_states` x (M, N); `gate_weight` Wg
  (2W, N); `gate_bias` bg (2W). Then three default nn.Linear built on the CPU in fp32
  from the CPU generator (weight (out, in) by kaiming_uniform(a = sqrt(5)), i.e.
  U(-1/sqrt(in), 1/sqrt(in)), then bias (out) from the same range), cast to the dtype
  and moved to the device: `gate_proj` N -> 128, `up_proj` N -> 128, `down_proj`
  128 -> N, each passed as its weight and bias. Scalars: num_experts = 2W, top_k = 2.
  Every rank's tensors differ. Each rank has ONE set of MLP weights for both its
  experts: the expert id only picks the destination rank floor(e / 2).
- Computation (the EP pipeline of 31): logits = x Wg^T + bg in dtype; p = softmax in
  dtype; (w, sel) = topk(p, 2) (no renormalization). Counts per expert all-gathered
  over WORLD into (W, 2W); pairs (e, t) expert-major, ascending t; rows sent with
  all_to_all_single (variable splits) to rank floor(e / 2); received chunks regrouped
  to (local expert, source) order; Y = down(silu(gate(X)) * up(X)), every op rounded
  to dtype; regrouping undone, rows sent back, row (e, t) times p[t, e] (dtype) and
  scatter-added into zeros (M, N) dtype at row t.
  Closed form: out[t] = sum_j w[t,j] * MLP_{floor(sel[t,j] / 2)}(x[t]). When both of a
  token's experts live on one rank, that rank receives the token twice and both
  results are weighted and summed.
- Output: `out` (M, N) dtype. Split sizes depend on the data.
)md" + std::string(kMoeTiesText) +
            R"md(- Numerics: routing must be computed exactly as above (dtype logits, softmax, topk:
  it decides the destination). The MLP and combine may use fp32 intermediates:
  |out| <~ 1, and PKB's atol = rtol = 1e-2 admits that.
- Traffic per rank: dispatch and combine ~ (W-1)/W * 2 M N b bytes each; an
  all-gather of 2W int64 counts. FLOPs: router 2 M N 2W, experts 6 R N 128 (R ~ 2M).)md"};
    return i;
  }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    return RequirePositiveShape(cfg);
  }

  int64_t NumExperts(int world) const override { return 2 * world; }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    Tolerance t;
    t.rationale =
        "PKB's atol = rtol = 1e-2. |out| <~ 1 and each token sums two dtype-rounded products "
        "(exact and order-free for k = 2); fp32 MLP and combine intermediates stay well inside "
        "it (as measured for 31, which has the same pipeline). Routing has no tolerance beyond "
        "ties "
        "(any expert tied at the k-th value passes): a token "
        "sent to another rank's MLP is wrong by ~100%.";
    return t;
  }
};
PKB_REGISTER_PROBLEM(MoeEpWide);

}  // namespace
}  // namespace pkb
