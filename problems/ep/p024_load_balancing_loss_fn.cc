// Problem 24 — Switch/Mixtral-style MoE load-balancing (auxiliary) loss of each rank's router
// logits, averaged over WORLD.
#include "absl/strings/str_cat.h"
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

constexpr int64_t kExperts = 8;
constexpr int64_t kTopK = 2;
// Sets after PKB's draw a per-expert bias of this standard deviation: routing then collapses
// onto a few experts by a different amount on every rank and set (loss ~3-7 instead of ~2).
constexpr double kBiasStd = 2.0;

// E * sum_{k,e} f[k, e] * mean_i P[i, e] for one rank's logits, as PKB computes it: softmax in the
// dtype, top-k on it (torch.topk), f in fp32, the probability mean in the dtype.
at::Tensor LocalLoss(const at::Tensor& logits) {
  at::Tensor p = at::softmax(logits, -1);
  at::Tensor chosen = std::get<1>(at::topk(p, kTopK, -1));
  at::Tensor tokens_per_expert = at::one_hot(chosen, kExperts).to(at::kFloat).mean(0);
  at::Tensor prob_per_expert = p.mean(0);
  return (tokens_per_expert * prob_per_expert.unsqueeze(0)).sum() * kExperts;
}

class LoadBalancingLoss : public Problem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        24,
        "24_load_balancing_loss_fn",
        1,
        "generic (Switch Transformer / Mixtral auxiliary load-balancing loss, averaged over "
        "data-parallel ranks)",
        "expert parallel",
        R"md(MoE auxiliary load-balancing loss: each rank scores how evenly its tokens' top-2
routing spreads over 8 experts, and the ranks' losses are averaged over WORLD.

- Any W.
- Inputs per rank r (on the device): `gate_logits`
  (M, 8) run dtype: randn (M, 8) in set 0 (PKB's); in the other sets randn (M, 8) +
  2 * randn (8,) (a per-expert bias drawn second, rounded to the dtype), so routing is
  imbalanced differently on every rank; non-tensor `num_experts` = 8, `top_k` = 2
  (PKB's attention_mask is None).
- Computation per rank: P = softmax(gate_logits, -1) (fp32 inside, rounded to the
  dtype); the top-2 experts of each token on P; f[k, e] = fraction of the M tokens
  whose k-th choice is e ((2, 8) fp32); pbar[e] = mean over tokens of P[:, e] (fp32
  accumulation, rounded to the dtype); loss_r = 8 * sum_{k,e} f[k, e] * pbar[e] (fp32).
  Output = (sum_r loss_r) / W (fp32 all-reduce SUM, then divided by W).
- Output: `loss` () float32, identical on all ranks.
- Tolerance: PKB's |got - ref| <= 0.01 + 0.01 |ref|, which fits: keeping P or pbar in
  fp32 (a fused kernel) moves the loss by at most 2u relative (u = 2^-8 for bf16;
  0.1% typically), and a bf16 tie for 2nd place (~0.5% of tokens) may go either way,
  each moving loss_r by 8/M |pbar_a - pbar_b|. Top-1 routing, a missing softmax, no
  all-reduce or no division by W fail on the biased sets. On PKB's set 0 every rank's
  loss is 2 + O(1/M) (even routing), so that set alone cannot catch much.
- Traffic: one 4-byte all-reduce (latency); HBM: read M * 8 * b; ~60 M FLOPs.)md"};
    return i;
  }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    return RequirePositiveShape(cfg);
  }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    at::Tensor logits = at::randn({cfg.m, kExperts}, Opts(cfg));
    if (set > 0) logits = logits + at::randn({kExperts}, Opts(cfg)) * kBiasStd;
    Inputs in;
    in.Add("gate_logits", logits);
    in.scalars.push_back(ScalarArg::Int("num_experts", kExperts));
    in.scalars.push_back(ScalarArg::Int("top_k", kTopK));
    return in;
  }

  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    return {{"loss", {}, at::kFloat}};
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    at::Tensor loss = LocalLoss(in[0]);
    PKB_RETURN_IF_ERROR(comm.AllReduce(loss, ReduceOp::kSum));
    return std::vector<at::Tensor>{loss / static_cast<int64_t>(comm.size())};
  }

  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    at::Tensor sum = at::zeros({}, all[0][0].options().dtype(at::kDouble));
    for (const auto& in : all) sum += LocalLoss(in[0]).to(at::kDouble);
    at::Tensor loss = sum.to(at::kFloat) / static_cast<int64_t>(all.size());
    return std::vector<std::vector<at::Tensor>>(all.size(), {loss});
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    Tolerance t;
    t.rationale =
        "PKB's atol = rtol = 1e-2 on a loss of 2-8. Correct variants stay well inside it: P or "
        "the probability means kept in fp32 move each term by <= u relative (<= 2u = 0.8% in "
        "all, ~0.1% typically), and top-2 ties on the bf16 probabilities (~0.5% of tokens) "
        "broken the other way move a rank's loss by 8/M |pbar_a - pbar_b| each (hazard test: "
        "every tie reversed passes). Mistakes fail on the biased sets: top-1 routing (~-50%), "
        "the local loss without the all-reduce, a sum instead of the mean over ranks, the "
        "logits instead of the probabilities.";
    return t;
  }

  // PKB's set 0 draws unbiased logits: every rank's loss is 2 + O(1/M) and a rank with zeroed
  // logits (uniform probabilities) gives exactly 2, within the tolerance of the truth.
  bool RankMissingDetectable(const RunConfig& cfg, int set, int index) const override {
    return set > 0;
  }

  Roofline GetRoofline(const RunConfig& cfg) const override {
    Roofline r;
    r.nvlink_bytes = AllReduceFactor(cfg.world) * 4;
    r.hbm_bytes = double(cfg.m) * kExperts * ElementBytes(cfg.dtype);
    r.flops = 60.0 * cfg.m;  // softmax, top-2, two means, the dot product
    r.collective_bytes = 4;
    r.busbw_factor = AllReduceFactor(cfg.world);
    return r;
  }
};
PKB_REGISTER_PROBLEM(LoadBalancingLoss);

}  // namespace
}  // namespace pkb
