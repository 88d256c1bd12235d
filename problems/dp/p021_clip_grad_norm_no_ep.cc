// Problem 21 — FSDP2-style gradient-norm clipping: fp32 sum of squares of three gradients,
// all-reduced over WORLD, then every gradient scaled by max_norm / total.
#include "absl/strings/str_cat.h"
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

constexpr int kGrads = 3;
constexpr double kMaxNorm = 1.0;
// Relative error allowed in the fp32 total norm: fp32 sums of ~3M squares in any reasonable order
// (tree, blocked, atomics) agree to ~1e-6, so this is a ~100x margin.
constexpr double kTotalRtol = 1e-4;

// sum_g ||fp32(g)||^2, accumulated as PKB does: acc = 0 + n_0^2 + n_1^2 + ... (fp32).
at::Tensor LocalSumOfSquares(const std::vector<at::Tensor>& grads) {
  at::Tensor acc = at::zeros({}, grads[0].options().dtype(at::kFloat));
  for (const at::Tensor& g : grads) acc = acc + at::norm(g.to(at::kFloat), 2).pow(2.0);
  return acc;
}

// PKB: `if total > max_norm: g.mul_(max_norm / total)`. Python's `float / tensor` is
// reciprocal() * float, and a dtype tensor times a 0-dim fp32 tensor multiplies by the fp32
// coefficient (measured on CPU; not rounded to the dtype first) and rounds once.
std::vector<at::Tensor> Clip(const std::vector<at::Tensor>& grads, const at::Tensor& total) {
  std::vector<at::Tensor> out;
  const bool clip = total.item<float>() > kMaxNorm;  // PKB's host sync
  at::Tensor coef = at::reciprocal(total) * kMaxNorm;
  for (const at::Tensor& g : grads) out.push_back(clip ? g.mul(coef) : g.clone());
  return out;
}

class ClipGradNormNoEp : public Problem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        21,
        "21_clip_grad_norm_no_ep",
        1,
        "generic (FSDP2-style clip_grad_norm_ over a data-parallel / FSDP group)",
        "data parallel",
        R"md(Gradient-norm clipping over WORLD: the global L2 norm of three gradients held by every
rank, then every gradient scaled by max_norm / norm.

- Any W.
- Inputs per rank r (drawn in this order on the
  device): `grad_0`, `grad_1`, `grad_2`, each (M, N) run dtype, randn, different per
  rank (PKB passes them as one list); non-tensor `max_norm` = 1.0, `norm_type` = 2.0.
  PKB's group argument is WORLD.
- Computation: local = sum over the three gradients of ||fp32(grad)||_2^2 (fp32);
  all-reduce SUM of that fp32 scalar over WORLD; total = sqrt(sum) (fp32, ~1774 sqrt(W)
  at the default shape). If total > max_norm (always, with these inputs) every gradient
  is scaled by c = max_norm / total (fp32): out = dtype(fp32(grad) * c), one rounding
  (the fp32 coefficient is used as is, not rounded to the dtype first).
- Outputs: `total_norm` () float32, identical on all ranks; `clipped_0`, `clipped_1`,
  `clipped_2` (M, N) run dtype: the scaled gradients. PKB scales its arguments in place
  and returns only the norm; here the inputs are READ-ONLY (modifying one is an error)
  and the clipped gradients are outputs that are checked, so every call does the full
  work (in PKB's timing loop the in-place scaling shrank the inputs call after call).
- Tolerances: total_norm |got - ref| <= 1e-4 |ref| (any fp32 summation order passes; a
  missing rank or gradient is off by >= 6%). Clipped gradients: |got - ref| <= (4u +
  1e-4) |ref|, atol 0 (u = 2^-8 for bf16): admits the coefficient rounded to the dtype
  first and a total that differs within its own tolerance. PKB's atol = 1e-2 would be
  vacuous here (the clipped values are ~6e-4), so there is no absolute slack.
- Traffic: one 4-byte all-reduce (latency); HBM: read 3 M N b for the norms, read and
  write 3 M N b for the scaling (the second read can hit L2 at the default size).)md"};
    return i;
  }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    return RequirePositiveShape(cfg);
  }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    Inputs in;
    for (int i = 0; i < kGrads; ++i) {
      in.Add(absl::StrCat("grad_", i), at::randn({cfg.m, cfg.n}, Opts(cfg)));
    }
    in.scalars.push_back(ScalarArg::Float("max_norm", kMaxNorm));
    in.scalars.push_back(ScalarArg::Float("norm_type", 2.0));
    return in;
  }

  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    std::vector<OutputDecl> out{{"total_norm", {}, at::kFloat}};
    for (int i = 0; i < kGrads; ++i) {
      out.push_back({absl::StrCat("clipped_", i), {cfg.m, cfg.n}, cfg.dtype});
    }
    return out;
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    at::Tensor sum = LocalSumOfSquares(in.tensors);
    PKB_RETURN_IF_ERROR(comm.AllReduce(sum, ReduceOp::kSum));
    at::Tensor total = sum.pow(1.0 / 2.0);
    std::vector<at::Tensor> out{total};
    for (at::Tensor& g : Clip(in.tensors, total)) out.push_back(g);
    return out;
  }

  // The ranks' fp32 partials summed in fp64 and rounded once: one of the orders the tolerance
  // admits.
  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    at::Tensor sum = at::zeros({}, all[0][0].options().dtype(at::kDouble));
    for (const auto& in : all) sum += LocalSumOfSquares(in.tensors).to(at::kDouble);
    at::Tensor total = sum.to(at::kFloat).pow(1.0 / 2.0);
    std::vector<std::vector<at::Tensor>> out;
    for (const auto& in : all) {
      std::vector<at::Tensor> r{total};
      for (at::Tensor& g : Clip(in.tensors, total)) r.push_back(g);
      out.push_back(std::move(r));
    }
    return out;
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    Tolerance t;
    t.atol = 0;
    if (index == 0) {
      t.rtol = kTotalRtol;
      t.rationale =
          "fp32 total norm of ~3 M N W squares: any fp32 summation order (tree, blocked, "
          "atomics, per-gradient or fused) agrees to ~1e-6, so rtol = 1e-4 is a ~100x margin, "
          "while one rank missing changes the norm by >= 1 - sqrt(7/8) = 6.5% (W <= 8) and one "
          "gradient missing by 18%. PKB's 1e-2 admits errors of 1% of the norm.";
      return t;
    }
    t.rtol = 4 * UnitRoundoff(cfg.dtype) + kTotalRtol;
    t.rationale = absl::StrCat(
        "Clipped gradient dtype(g * c), c = max_norm / total ~ 5.6e-4 / sqrt(W): rtol = 4u + "
        "1e-4 = ",
        t.rtol,
        " (u = unit roundoff of the dtype) admits c rounded to the dtype before the multiply "
        "(<= 3u after both roundings) and a total within its own 1e-4; atol = 0 because the "
        "clipped values are ~6e-4 and PKB's atol = 1e-2 would pass all zeros. A coefficient "
        "from a norm missing one rank (>= 6.9% off) or no clipping fails.");
    return t;
  }

  Roofline GetRoofline(const RunConfig& cfg) const override {
    const double grad_bytes = kGrads * double(cfg.m) * cfg.n * ElementBytes(cfg.dtype);
    Roofline r;
    r.nvlink_bytes = AllReduceFactor(cfg.world) * 4;
    // Read every gradient once and write every clipped one; the norm's pass and the scaling's
    // pass may share one HBM read when the gradients fit in L2.
    r.hbm_bytes = 2 * grad_bytes;
    r.flops = 3.0 * kGrads * cfg.m * cfg.n;  // square, add, scale
    r.collective_bytes = 4;
    r.busbw_factor = AllReduceFactor(cfg.world);
    return r;
  }
};
PKB_REGISTER_PROBLEM(ClipGradNormNoEp);

}  // namespace
}  // namespace pkb
