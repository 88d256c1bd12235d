// Problem 25 — RL policy-gradient loss with importance ratios (PPO/GRPO-like): full-vocabulary
// logits and cross-entropy per rank, token counts and loss sums normalized over WORLD, and five
// metrics reduced over WORLD.
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

constexpr int64_t kVocab = 32000;
constexpr int64_t kIgnoreIndex = -100;
constexpr double kClamp = 20.0;

// The stronger input sets (set > 0). Logits get std 0.5 so that ce ~ log V ~ 10.5 and the
// ratios exp(new - old) are O(1); old log-probs are centred on -10.5; 10% of labels are ignored,
// 5% of tokens get old log-probs 30 higher (their log-ratio clamps at -20); advantages are
// mostly positive so that the sums over tokens and ranks do not cancel.
constexpr double kLogitStd = 0.5;
constexpr double kOldCentre = -10.5;
constexpr double kIgnoredShare = 0.1;
constexpr double kClampedShare = 0.05;
constexpr double kClampShift = 30.0;

// One rank's per-token values and local partials, computed as PKB's reference does (every op in
// the dtype unless noted).
struct Local {
  at::Tensor new_logprobs, per_token_pg;                        // (M,) dtype
  at::Tensor n_valid;                                           // () fp32
  at::Tensor pg_sum, surrogate_sum, ratio_sum, k3_sum, ce_sum;  // () dtype, fp32-accumulated
  at::Tensor ratio_min, ratio_max;                              // () dtype
};

Local ComputeLocal(const Inputs& in) {
  const at::Tensor &hidden = in[0], &weight = in[1], &labels = in[2], &old_lp = in[3], &adv = in[4];
  at::Tensor logits = at::linear(hidden, weight);
  // PKB's F.cross_entropy. On CUDA the dtype log-softmax accumulates in fp32 and rounds once, as
  // the statement says; libtorch's CPU kernel rounds an intermediate to the dtype (one ulp off on
  // ~26% of bf16 elements), which CPU tests share between reference and oracle.
  at::Tensor ce = at::cross_entropy_loss(logits, labels, {}, at::Reduction::None, kIgnoreIndex);
  at::Tensor valid = labels.ne(kIgnoreIndex), invalid = valid.logical_not();
  Local l;
  l.new_logprobs = -ce;
  l.n_valid = valid.sum().to(at::kFloat);
  at::Tensor delta = (l.new_logprobs - old_lp).masked_fill(invalid, 0.0).clamp(-kClamp, kClamp);
  at::Tensor ratio = at::exp(delta);
  at::Tensor weighted = (ratio * adv).masked_fill(invalid, 0.0);
  l.per_token_pg = -weighted;
  l.pg_sum = l.per_token_pg.sum();
  l.surrogate_sum = (weighted * ce).sum();
  l.ratio_sum = ratio.masked_fill(invalid, 0.0).sum();
  const bool any = l.n_valid.item<float>() > 0;  // PKB's host sync
  const double inf = std::numeric_limits<double>::infinity();
  l.ratio_min = any ? ratio.masked_fill(invalid, inf).min() : at::full({}, inf, ratio.options());
  l.ratio_max = any ? ratio.masked_fill(invalid, -inf).max() : at::full({}, -inf, ratio.options());
  l.k3_sum = (ratio - delta - 1.0).masked_fill(invalid, 0.0).sum();
  l.ce_sum = ce.masked_fill(invalid, 0.0).sum();
  return l;
}

// The global sums of the ranks' dtype partials, computed by `sum` (fp64, exact) and rounded once.
// Assembles PKB's outputs from them: loss, per_token_logprobs, per_token_loss, metrics.
struct Global {
  at::Tensor n, pg, ratio, ratio_min, ratio_max, k3, ce;
};

std::vector<at::Tensor> Assemble(const Local& l, const Global& g) {
  at::Tensor n = g.n.clamp_min(1.0);
  at::Tensor true_pg = g.pg / n;  // a dtype 0-dim over an fp32 0-dim: fp32
  at::Tensor surrogate = l.surrogate_sum / n;
  at::Tensor loss = true_pg + surrogate - surrogate;  // PKB's detach trick, left to right
  at::Tensor metrics = at::stack({g.ratio / n, g.ratio_min, g.ratio_max, g.k3 / n, g.ce / n});
  return {loss, l.new_logprobs, l.per_token_pg, metrics};
}

class ImportanceSamplingLoss : public Problem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        25,
        "25_importance_sampling_loss",
        1,
        "generic (RL policy-gradient loss with importance ratios and DP-global token "
        "normalization, PPO/GRPO-like)",
        "data parallel",
        R"md(Policy-gradient loss with importance-sampling ratios: per-token log-probs from a full-
vocabulary LM head, ratios exp(new - old), token-count normalization over WORLD, and
five metrics reduced over WORLD.

- Any W. V = 32000.
- Inputs per rank r (drawn in this order on the
  device): `hidden_states` (M, N) run dtype, randn; `weight` (V, N) run dtype, randn
  (the full vocabulary on every rank, values differ per rank); `labels` (M,) int64,
  randint(0, V); `old_logprobs` (M,) and `advantages` (M,) run dtype, randn;
  non-tensor `ignore_index` = -100. That is PKB's set 0, where the logits have std
  sqrt(N) = 32, ce ~ 130 +- 30, and all but a rare token (ce < ~21) clamp their
  log-ratio at -20, so the ratios are exp(-20) ~ 2e-9. The other sets then draw
  u1 = rand(M), u2 = rand(M) (fp32) and set hidden_states *= 0.5/sqrt(N) (logits std
  0.5, ce ~ 10.5), labels = -100 where u1 < 0.1, old_logprobs = old_logprobs * 0.5 -
  10.5 (+ 30 where u2 < 0.05, whose log-ratio then clamps), advantages = advantages *
  0.5 + 1 (each op in the dtype), so that ratios are O(1) and sums do not cancel.
- Computation (PKB's, every op rounding to the dtype unless noted):
  logits = hidden_states @ weight^T, ROUNDED TO THE DTYPE (M, V);
  ce_i = -log_softmax(logits_i)[label_i] (log-softmax in fp32 from the rounded logits,
  rounded to the dtype once), 0 where label_i = -100; new_i = -ce_i;
  valid_i = label_i != -100.
  n = sum over ranks of #valid (fp32); nh = max(n, 1).
  delta_i = clamp(new_i - old_i, -20, 20), 0 where invalid; ratio_i = exp(delta_i);
  pg_i = -(ratio_i * adv_i), 0 where invalid; w_i = -pg_i.
  Local sums over the rank's tokens, each accumulated in fp32 and rounded to the dtype:
  P = sum pg_i, Q = sum w_i * ce_i (the product in the dtype), R = sum of valid ratio_i,
  K = sum of valid (ratio_i - delta_i - 1), E = sum of valid ce_i.
  Cross-rank sums: for X in P, R, K, E, X_g = dtype(exact sum over ranks of X_r), the
  CORRECTLY ROUNDED sum of the ranks' dtype partials (accumulate in fp32 or fp64, never
  in the dtype; the reference all-reduces fp64). PKB all-reduces them in bf16 with
  per-hop rounding, which moves a sum that cancels (P on PKB's inputs) by many ulps.
  loss = (P_g / nh + Q / nh) - Q / nh in fp32, in that order (PKB's detach trick: not
  exactly P_g / nh, and Q is this rank's own); metrics = [R_g / nh, min over all ranks'
  valid ratio_i, max over them, K_g / nh, E_g / nh] (fp32; min/max stay dtype values).
- Outputs: `loss` () float32 (differs per rank through Q); `per_token_logprobs` (M,)
  run dtype = new; `per_token_loss` (M,) run dtype = pg; `metrics` (5,) float32,
  identical on all ranks. (PKB's second return value is None: omitted.)
- Tolerances (atol 0 unless noted; u = 2^-8 for bf16). PKB's atol = 1e-2 is vacuous
  on set 0, where loss, per_token_loss and the ratio metrics are ~1e-9 (all zeros, or
  ratios without the clamp, would pass); these are relative instead:
  loss and metrics rtol 4u + 1e-5 (a correct candidate's per-token values may differ
  by a rounding, which can move a dtype partial or a global sum by one ulp);
  per_token_loss rtol expm1(16u) + 4u (~8%: one ulp of ce ~ 10.5 is 1/16 in bf16, so
  a ce that rounds the other way moves that token's ratio by exp(1/16));
  per_token_logprobs PKB's atol = rtol = 1e-2 (one ulp of ce, not two).
  Keep the logits rounded to the dtype: feeding fp32 logits to the log-softmax (a fused
  kernel) rounds ce the other way on ~1% of tokens in sets > 0 (~25% on set 0), and
  ratio_max, one token's ratio, is then ~6% off when that token is one of them.
- Traffic: 7 scalar all-reduces (n, P, R, min, max, K, E; latency-bound, fusable).
  FLOPs: 2 M N V for the logits (68.7 GFLOP at the default shape) + ~5 M V for the
  log-softmax; HBM at least the weight V N b (65.5 MB) and hidden M N b (the M x V
  logits need not be written).)md"};
    return i;
  }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    return RequirePositiveShape(cfg);
  }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    at::Tensor hidden = at::randn({cfg.m, cfg.n}, Opts(cfg));
    at::Tensor weight = at::randn({kVocab, cfg.n}, Opts(cfg));
    at::Tensor labels = at::randint(0, kVocab, {cfg.m}, Opts(cfg).dtype(at::kLong));
    at::Tensor old_lp = at::randn({cfg.m}, Opts(cfg));
    at::Tensor adv = at::randn({cfg.m}, Opts(cfg));
    if (set > 0) {
      at::Tensor ignored = at::rand({cfg.m}, Opts(cfg).dtype(at::kFloat)).lt(kIgnoredShare);
      at::Tensor clamped = at::rand({cfg.m}, Opts(cfg).dtype(at::kFloat)).lt(kClampedShare);
      hidden = hidden * (kLogitStd / std::sqrt(double(cfg.n)));
      labels = labels.masked_fill(ignored, kIgnoreIndex);
      old_lp = old_lp * 0.5 + kOldCentre + clamped.to(cfg.dtype) * kClampShift;
      adv = adv * 0.5 + 1.0;
    }
    Inputs in;
    in.Add("hidden_states", hidden);
    in.Add("weight", weight);
    in.Add("labels", labels);
    in.Add("old_logprobs", old_lp);
    in.Add("advantages", adv);
    in.scalars.push_back(ScalarArg::Int("ignore_index", kIgnoreIndex));
    return in;
  }

  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    return {{"loss", {}, at::kFloat},
            {"per_token_logprobs", {cfg.m}, cfg.dtype},
            {"per_token_loss", {cfg.m}, cfg.dtype},
            {"metrics", {5}, at::kFloat}};
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    Local l = ComputeLocal(in);
    // Exact: fp64 holds the sum of W dtype values (integers, for n) without rounding.
    auto exact_sum = [&](const at::Tensor& partial) -> absl::StatusOr<at::Tensor> {
      at::Tensor t = partial.to(at::kDouble);
      PKB_RETURN_IF_ERROR(comm.AllReduce(t, ReduceOp::kSum));
      return t.to(partial.scalar_type());
    };
    auto reduced = [&](const at::Tensor& partial, ReduceOp op) -> absl::StatusOr<at::Tensor> {
      at::Tensor t = partial.clone();
      PKB_RETURN_IF_ERROR(comm.AllReduce(t, op));
      return t;
    };
    Global g;  // PKB's collective order: n, pg, ratio, min, max, k3, entropy
    PKB_ASSIGN_OR_RETURN(g.n, exact_sum(l.n_valid));
    PKB_ASSIGN_OR_RETURN(g.pg, exact_sum(l.pg_sum));
    PKB_ASSIGN_OR_RETURN(g.ratio, exact_sum(l.ratio_sum));
    PKB_ASSIGN_OR_RETURN(g.ratio_min, reduced(l.ratio_min, ReduceOp::kMin));
    PKB_ASSIGN_OR_RETURN(g.ratio_max, reduced(l.ratio_max, ReduceOp::kMax));
    PKB_ASSIGN_OR_RETURN(g.k3, exact_sum(l.k3_sum));
    PKB_ASSIGN_OR_RETURN(g.ce, exact_sum(l.ce_sum));
    return Assemble(l, g);
  }

  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    std::vector<Local> locals;
    for (const auto& in : all) locals.push_back(ComputeLocal(in));
    auto sum = [&](at::Tensor Local::*field) {
      at::Tensor s = at::zeros({}, all[0][0].options().dtype(at::kDouble));
      for (const Local& l : locals) s += (l.*field).to(at::kDouble);
      return s.to((locals[0].*field).scalar_type());
    };
    auto extreme = [&](at::Tensor Local::*field, bool max) {
      std::vector<at::Tensor> v;
      for (const Local& l : locals) v.push_back(l.*field);
      at::Tensor s = at::stack(v);
      return max ? s.max() : s.min();
    };
    Global g{sum(&Local::n_valid),
             sum(&Local::pg_sum),
             sum(&Local::ratio_sum),
             extreme(&Local::ratio_min, false),
             extreme(&Local::ratio_max, true),
             sum(&Local::k3_sum),
             sum(&Local::ce_sum)};
    std::vector<std::vector<at::Tensor>> out;
    for (const Local& l : locals) out.push_back(Assemble(l, g));
    return out;
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    const double u = UnitRoundoff(cfg.dtype);
    Tolerance t;
    t.atol = 0;
    switch (index) {
      case 0:
        t.rtol = 4 * u + 1e-5;
        t.rationale = absl::StrCat(
            "loss = (P_g/nh + Q/nh) - Q/nh in fp32, P_g the correctly rounded sum of the ranks' "
            "dtype partials. A correct candidate's per-token values can differ by one rounding "
            "(a ce rounded the other way moves its ratio by exp(ulp)), which can move a rank's "
            "partial or the global sum by one dtype ulp (<= 2u relative each): rtol = 4u + "
            "1e-5 = ",
            t.rtol,
            ", atol 0. PKB's atol = 1e-2 passes anything on its own inputs (loss ~1e-11); the "
            "stronger sets (mostly positive advantages) make a missing rank 1/W of the loss. "
            "PKB's bf16 all-reduce of P would need many ulps when P cancels, so P_g is exact.");
        return t;
      case 1:
        return Tolerance{1e-2, 1e-2, false,
                         "per-token log-probs: PKB's atol = rtol = 1e-2 admits one ulp of ce "
                         "(1/16 at ce ~ 10.5, 1 at ce ~ 130 in bf16) and not two, and a "
                         "log-softmax from fp32 logits; a wrong label or a missing max-"
                         "subtraction fails."};
      case 2:
        t.rtol = std::expm1(16 * u) + 4 * u;
        t.rationale = absl::StrCat(
            "per-token loss -ratio*adv: one ulp of ce ~ 10.5 (16u) rounded the other way "
            "changes that token's ratio by exp(16u), plus the roundings of ratio and the "
            "product: rtol = expm1(16u) + 4u = ",
            t.rtol,
            ", atol 0 (on PKB's set 0 the values are ~2e-9, so its atol = 1e-2 passes zeros or "
            "an unclamped ratio). Every ratio on set 0 is the clamped exp(-20), so there the "
            "check is exact in practice.");
        return t;
      default:
        t.rtol = 4 * u + 1e-5;
        t.rationale = absl::StrCat(
            "metrics [ratio mean, min, max, k3 mean, entropy mean]: sums are correctly rounded "
            "sums of dtype partials, each of which a correct candidate may round one ulp "
            "differently (<= 2u relative, twice): rtol = 4u + 1e-5 = ",
            t.rtol,
            ", atol 0. PKB's atol = 1e-2 passes zeros for the three ratio metrics (~2e-9 on "
            "its inputs). ratio_max is one token's ratio: keep the logits rounded to the dtype, "
            "or its ce may round the other way (~6%).");
        return t;
    }
  }

  // On PKB's set 0 the advantages have both signs, so one rank's share of P_g can be smaller than
  // the one-ulp slack of the loss; the stronger sets keep the check.
  bool RankMissingDetectable(const RunConfig& cfg, int set, int index) const override {
    return set > 0 || index != 0;
  }

  Roofline GetRoofline(const RunConfig& cfg) const override {
    const double b = ElementBytes(cfg.dtype);
    const double m = cfg.m, n = cfg.n;
    Roofline r;
    r.nvlink_bytes = 7 * AllReduceFactor(cfg.world) * 4;   // seven scalars (fp32 suffices)
    r.hbm_bytes = (kVocab * n + m * n) * b + 4.0 * m * b;  // weight, hidden, per-token vectors
    r.flops = 2.0 * m * n * kVocab + 5.0 * m * kVocab;
    return r;
  }
};
PKB_REGISTER_PROBLEM(ImportanceSamplingLoss);

}  // namespace
}  // namespace pkb
