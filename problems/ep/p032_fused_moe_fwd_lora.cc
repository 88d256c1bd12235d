// Problem 32 — the fused expert-parallel MoE forward of 31 with unscaled rank-8 LoRA adapters on
// the expert's three projections.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "problems/ep/moe_pipeline.h"
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

constexpr int64_t kExperts = 8;
constexpr int64_t kRank = 8;  // LoRA rank r

// The LoRA factors follow the 31 inputs, in this order.
enum : size_t { kGateA = kMoeDnB + 1, kGateB, kUpA, kUpB, kDownA, kDownB };

// PKB's lora linear: x W^T + b + (x A^T) B^T, every GEMM and the add rounded to dtype.
at::Tensor LoraLinear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                      const at::Tensor& a, const at::Tensor& bb) {
  return at::linear(x, w, b) + at::linear(at::linear(x, a), bb);
}

class FusedMoeFwdLora : public MoeEpProblem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        32,
        "32_fused_moe_fwd_lora",
        2,
        "VeOmni EP MoE forward with LoRA experts (token_pre_all2all / tokens_post_all2all)",
        "expert parallel",
        absl::StrCat(
            R"md(The expert-parallel MoE forward of 31 over WORLD (E = 8 experts, top_k = 2, L = 8/W
local experts per rank, rank d hosting experts [d L, (d+1) L)) with rank-8 LoRA
adapters on the expert's three projections. Requires W | 8.

- Inputs per rank r, in call order. On the
  device, randn in the run dtype: `hidden_states` x (M, N); `gate_weight` Wg (8, N);
  `gate_bias` bg (8). Then three default nn.Linear built on the CPU in fp32 from the
  CPU generator (weight (out, in) by kaiming_uniform(a = sqrt(5)), i.e.
  U(-1/sqrt(in), 1/sqrt(in)), then bias (out) from the same range), cast to the
  dtype and moved to the device: `gate_proj` N -> 128, `up_proj` N -> 128,
  `down_proj` 128 -> N, each passed as its weight and bias. Then, continuing the
  device stream, randn in the dtype, UNSCALED N(0, 1): `lora_gate_A` (8, N),
  `lora_gate_B` (128, 8), `lora_up_A` (8, N), `lora_up_B` (128, 8), `lora_down_A`
  (8, 128), `lora_down_B` (N, 8). Scalars: num_experts = 8, top_k = 2. Every rank's
  tensors differ; each rank applies its one expert to every row it receives.
- Computation: the pipeline of 31 (dtype logits, softmax, topk(2) without
  renormalization; counts all-gathered; rows dispatched expert-major with
  all_to_all_single to rank floor(e / L); regrouped by local expert; expert; sent
  back; each row (e, t) times p[t, e] and scatter-added at row t of zeros (M, N)),
  with the expert
    g = gate(X) + (X A_g^T) B_g^T;  u = up(X) + (X A_u^T) B_u^T;  Y = silu(g) * u;
    out = down(Y) + (Y A_d^T) B_d^T,
  every GEMM (width-8 intermediates included), add, silu and product rounded to
  dtype in the reference. No LoRA alpha scaling.
  Closed form: out[t] = sum_j w[t,j] * MLP_{floor(sel[t,j] / L)}(x[t]).
- Output: `out` (M, N) dtype. Split sizes depend on the data.
- Numerics (hard): the unscaled LoRA factors dominate: g, u ~ sqrt(8N) (~90 at
  N = 1024), Y ~ 6N, |out| ~ S = sqrt(r^3 I / 2) N = 181 N (~1.9e5 at N = 1024; max
  ~ 10 S). Every dtype rounding in the chain moves out by ~u S whatever the element's
  own size, so PKB's rtol = 1e-2 fails correct kernels near zero crossings.
  Tolerance here: rtol = 1e-2 and atol = )md",
            kAtolUlps,
            R"md( u S (u = 2^-8 for bf16): fp32 accumulation across the chain, merged or fused
  GEMMs and another summation order pass; a wrong expert, a missing LoRA term, LoRA
  scaled by alpha / r, unweighted or swapped routing weights or a missing rank fail.
  The base projections move out by only ~2% of S, below what fp32 chains differ by,
  so the tolerance cannot see them: they are still required. Routing as in 31
  (dtype logits, softmax, topk: it decides the destination).
- TIES: any valid tie choice passes, as in 31. Where a token's k-th probability
  equals that of an expert left out, torch.topk may pick any of the tied experts;
  the harness computes the output row of every such choice and accepts a row that
  matches any one of them within the tolerance. A token sent to an expert below the
  k-th probability fails.
- Traffic per rank: as 31. FLOPs: router 2 M N 8, experts R (6 N 128 + 16 (3N +
  384)) with R ~ 2M rows received.)md")};
    return i;
  }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    PKB_RETURN_IF_ERROR(RequirePositiveShape(cfg));
    if (kExperts % cfg.world != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "32_fused_moe_fwd_lora spreads its 8 experts evenly over WORLD: W must divide 8 (W in "
          "{1, 2, 4, 8}), got W = ",
          cfg.world));
    }
    return absl::OkStatus();
  }

  int64_t NumExperts(int world) const override { return kExperts; }

  // The typical |out|: the LoRA down branch dominates. g ~ N(0, r N), Y = silu(g) u has
  // E[Y^2] ~ (r N / 2)(r N), Y A_d^T sums I terms, then r more: S^2 = r^3 I N^2 / 2.
  static double OutputScale(const RunConfig& cfg) {
    return std::sqrt(static_cast<double>(kRank * kRank * kRank * kMoeInter) / 2) * cfg.n;
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    const double u = UnitRoundoff(cfg.dtype), s = OutputScale(cfg);
    Tolerance t;
    t.rtol = 1e-2;
    t.atol = kAtolUlps * u * s;
    t.rationale = absl::StrCat(
        "rtol = 1e-2 (PKB's) plus atol = ", kAtolUlps, " u S = ", t.atol, ", S = 181 N = ", s,
        " the typical |out| (unscaled LoRA: |out| ~ 1e5 at N = 1024). Each dtype rounding of the "
        "chain (the width-8 LoRA intermediates, g, u, silu, Y, the GEMM outputs) moves every "
        "output element by ~u S, not by u |out[i]|, so PKB's plain 1e-2 accepts only the "
        "reference's exact GEMM calls: a kernel with fp32 intermediates failed 27% of elements "
        "and a different accumulation order 0.04% (catalog, measured). Measured here: correct "
        "alternatives stay below ~",
        kMeasuredUsed,
        " of it (fp32 chain, LoRA merged into the base weights, exact GEMM sums; M = 64, N = 512, "
        "W = 4 and 8), while a wrong expert, a missing LoRA term, alpha / r scaling, swapped or "
        "missing routing weights and a missing rank exceed it 15-fold or more. Not caught (as "
        "with any tolerance that admits fp32 chains): the base projections alone move out by ~2% "
        "of S, and top-2 renormalization hardly changes PKB's peaked routing.");
    return t;
  }

 protected:
  void AddExpertExtras(const RunConfig& cfg, int set, Inputs& in) const override {
    auto opts = at::TensorOptions().dtype(cfg.dtype).device(cfg.device);
    in.Add("lora_gate_A", at::randn({kRank, cfg.n}, opts));
    in.Add("lora_gate_B", at::randn({kMoeInter, kRank}, opts));
    in.Add("lora_up_A", at::randn({kRank, cfg.n}, opts));
    in.Add("lora_up_B", at::randn({kMoeInter, kRank}, opts));
    in.Add("lora_down_A", at::randn({kRank, kMoeInter}, opts));
    in.Add("lora_down_B", at::randn({cfg.n, kRank}, opts));
  }

  ExpertFn ExpertOf(const Inputs& in) const override {
    std::vector<at::Tensor> t = in.tensors;
    return [t](const at::Tensor& x) {
      at::Tensor g = LoraLinear(x, t[kMoeGpW], t[kMoeGpB], t[kGateA], t[kGateB]);
      at::Tensor u = LoraLinear(x, t[kMoeUpW], t[kMoeUpB], t[kUpA], t[kUpB]);
      return LoraLinear(at::silu(g) * u, t[kMoeDnW], t[kMoeDnB], t[kDownA], t[kDownB]);
    };
  }

  double ExtraExpertFlopsPerRow(const RunConfig& cfg) const override {
    return 2.0 * kRank * (2 * cfg.n + 2 * kMoeInter + kMoeInter + cfg.n);
  }

 private:
  static constexpr double kAtolUlps = 64;
  static constexpr double kMeasuredUsed = 0.27;
};
PKB_REGISTER_PROBLEM(FusedMoeFwdLora);

}  // namespace
}  // namespace pkb
