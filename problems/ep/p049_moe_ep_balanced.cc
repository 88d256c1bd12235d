// Problem 49 — balanced expert-parallel MoE forward: one expert per rank (E = W), top-2.
#include "absl/strings/str_cat.h"
#include "problems/ep/moe_pipeline.h"
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

constexpr int64_t kTopK = 2;

class MoeEpBalanced : public MoeEpProblem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        49,
        "49_moe_ep_balanced",
        2,
        "VeOmni EP MoE (token_pre_all2all / tokens_post_all2all)",
        "expert parallel",
        "Expert-parallel MoE forward with one expert per rank: E = W experts, top_k = 2, over "
        "WORLD.\n"
        "Rank d hosts expert d and applies its own SwiGLU MLP to every token routed to d.\n\n"
        "- Inputs per rank r (seed 42 + 49000 + r + 1000003*set). On the device, randn in the run\n"
        "  dtype, in order: `hidden_states` x (M, N); `gate_weight` Wg (E, N); `gate_bias` bg "
        "(E).\n"
        "  Then three default nn.Linear built on the CPU in fp32 from the CPU generator (weight\n"
        "  (out, in) ~ U(-1/sqrt(in), 1/sqrt(in)) by kaiming_uniform(a = sqrt(5)), then bias "
        "(out)\n"
        "  ~ U(-1/sqrt(in), 1/sqrt(in))), cast to the dtype and moved to the device:\n"
        "  `gate_proj` N -> 128, `up_proj` N -> 128, `down_proj` 128 -> N (passed as weight, bias\n"
        "  pairs). Scalars: num_experts = W, top_k = 2. Every rank's tensors differ.\n"
        "- Computation (the EP pipeline of 31): logits = x Wg^T + bg in dtype; p = "
        "softmax(logits)\n"
        "  in dtype; (w, sel) = topk(p, 2) (no renormalization). Counts per expert, all-gathered;\n"
        "  tokens permuted expert-major (ascending token within an expert), sent with\n"
        "  all_to_all_single (variable splits) to the expert's rank, run through that rank's\n"
        "  Y = down(silu(gate(X)) * up(X)) (every op rounded to dtype), sent back, multiplied by\n"
        "  p[t, e] (dtype) and scatter-added into zeros (M, N) dtype.\n"
        "  Closed form: out[t] = sum_j w[t,j] * MLP_{sel[t,j]}(x[t]), MLP_d with rank d's "
        "weights.\n"
        "- Output: `out` (M, N) dtype. Split sizes are data-dependent (the router is peaked: "
        "logit\n"
        "  spread ~ sqrt(N)); at W = 2 every token goes to both ranks.\n"
        "- TIES: any valid tie choice passes. Exact bf16 ties occur (a few tokens per rank):\n"
        "  where a token's k-th probability equals that of an expert left out, torch.topk\n"
        "  may pick any of the tied experts (its CUDA and CPU kernels may differ), and the\n"
        "  token goes to that expert's rank. The harness computes the output row of every\n"
        "  such choice and accepts a row that matches any one of them within the tolerance.\n"
        "  A token sent to an expert below the k-th probability, or to every tied one, fails.\n"
        "- Numerics: routing must be computed as above (dtype logits, softmax, topk): it decides\n"
        "  the destination. The MLP and the combine may use fp32\n"
        "  intermediates: |out| <~ 1, and atol = rtol = 1e-2 (PKB's) absorbs that.\n"
        "- Needs W >= 2 (top_k = 2 of E = W experts).\n"
        "- Traffic: dispatch and combine ~ (W-1)/W * 2 M N b bytes each way per rank."};
    return i;
  }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    if (cfg.world < kTopK) {
      return absl::InvalidArgumentError(
          absl::StrCat("49_moe_ep_balanced has num_experts = W = ", cfg.world,
                       " (one expert per rank) and "
                       "top_k = 2; topk cannot select 2 of ",
                       cfg.world, " expert(s): needs W >= 2"));
    }
    return absl::OkStatus();
  }

  int64_t NumExperts(int world) const override { return world; }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    Tolerance t;
    t.rationale =
        "PKB's atol = rtol = 1e-2. |out| <~ 1 and each token sums k = 2 dtype-rounded products "
        "(exact order-free for k = 2); a version with fp32 MLP/combine intermediates matched the "
        "bf16 reference with no failures (catalog, measured at 1024 x 1024, W = 8).";
    return t;
  }
};
PKB_REGISTER_PROBLEM(MoeEpBalanced);

}  // namespace
}  // namespace pkb
