// Problem 45 — sequence-parallel reduce-scatter fused with RMSNorm: the ranks' partial activations
// are summed and scattered by row blocks, averaged, and each rank RMS-normalizes its rows.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

constexpr double kEps = 1e-5;
// |gamma| bound used by the tolerance: gamma is 128 standard normals, max |gamma| > 4 has
// probability ~0.8% per input set, and even then only elements of that column get tighter.
constexpr double kGammaBound = 4.0;

int64_t Hidden(const RunConfig& cfg) { return std::clamp<int64_t>(cfg.n, 32, 128); }
int64_t Rows(const RunConfig& cfg) {
  const int64_t w = cfg.world;
  return std::max<int64_t>(2, std::max<int64_t>(cfg.m, w) / std::max<int64_t>(w, 4));
}

// x = dtype(fp32(sum) * fp32(1/W)) viewed (rows, hidden): PKB's `div_(world_size)` multiplies by
// the fp32 reciprocal on CUDA. y = dtype(x32 * rsqrt(mean(x32^2) + eps) * gamma32).
at::Tensor Normalized(const at::Tensor& sum, const at::Tensor& gamma, int world, double eps) {
  at::Tensor inv = at::full({}, 1.0f / static_cast<float>(world), sum.options().dtype(at::kFloat));
  at::Tensor x =
      (sum.to(at::kFloat) * inv).to(sum.scalar_type()).view({-1, gamma.numel()}).to(at::kFloat);
  at::Tensor rms = at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true).add(eps));
  return (x * rms * gamma.to(at::kFloat)).to(sum.scalar_type());
}

class ReduceScatterRmsNorm : public Problem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        45,
        "45_reducescatter_fused_rmsnorm",
        1,
        "generic (sequence-parallel reduce-scatter + RMSNorm fusion, as in TensorRT-LLM and "
        "Megatron SP)",
        "tensor parallel",
        R"md(Reduce-scatter fused with RMSNorm: the ranks' partial activations are summed, rank r
keeps row block r, divides by W and RMS-normalizes each row with a shared gamma.

- Any W. hidden = clamp(N, 32, 128); rows = max(2, floor(max(M, W) / max(W, 4)))
  (1024 / max(W, 4) at M = 1024); chunk = rows * hidden.
- Inputs, drawn on the device in this order: `gamma` (hidden,) run dtype, randn after
  seeding with the SHARED seed 42 + 45000 + 1000003*set (identical on every rank); then
  the generator is reseeded with the per-rank seed 42 + 45000 + r + 1000003*set and
  `rs_input` (W * chunk,) run dtype, randn is drawn. Argument order: rs_input, gamma,
  non-tensor `eps` = 1e-5.
- Computation: S = sum over ranks s of rs_input_s[r chunk : (r+1) chunk] (the reference
  reduce-scatters in the dtype, NCCL rounding at every hop); x = dtype(S * fp32(1/W)) viewed
  (rows, hidden); in fp32: y = x * rsqrt(mean over hidden of x^2 + eps) * gamma;
  output dtype(y).
- Output: `y` (rows, hidden) run dtype, different per rank.
- Tolerance (bf16-SUM hazard): the dtype sum depends on the summation order, and the
  norm multiplies its absolute error by rsqrt(mean x^2) ~ sqrt(W). |got - ref| <= atol +
  0.01 |ref| with atol = max(0.01, 2 u sqrt(W) * 4) (u = 2^-8 for bf16; 4 bounds
  |gamma|): 0.044 / 0.063 / 0.088 at W = 2 / 4 / 8. Any order (ring, tree, fp32
  accumulation rounded once, the /W fused into the norm) passes; one rank's
  contribution missing (x off by ~1/W), LayerNorm instead of RMSNorm, no gamma, or
  another rank's row block fail. Omitting the /W changes nothing but the eps term and
  passes (RMSNorm is scale-invariant).
- Checked on an H200 (torch 2.11): PKB's div_(W) is the multiply by fp32(1/W) bit for
  bit at W = 2, 6, 8; CUDA's and the CPU's fp32 norm differ by one ulp on ~1e-5 of
  the outputs.
- Traffic: reduce-scatter (W-1) chunk b bytes each way per rank; ~5 rows hidden FLOPs.)md"};
    return i;
  }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    return RequirePositiveShape(cfg);
  }

  // The harness seeds with Seed(rank, set); gamma comes from rank 0's seed, as PKB draws it.
  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    at::manual_seed(Seed(0, set));
    at::Tensor gamma = at::randn({Hidden(cfg)}, Opts(cfg));
    at::manual_seed(Seed(rank, set));
    Inputs in;
    in.Add("rs_input", at::randn({cfg.world * Rows(cfg) * Hidden(cfg)}, Opts(cfg)));
    in.Add("gamma", gamma);
    in.scalars.push_back(ScalarArg::Float("eps", kEps));
    return in;
  }

  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    return {{"y", {Rows(cfg), Hidden(cfg)}, cfg.dtype}};
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    const at::Tensor& input = in[0];
    at::Tensor sum = at::empty({input.numel() / comm.size()}, input.options());
    PKB_RETURN_IF_ERROR(comm.ReduceScatterInto(sum, input.contiguous(), ReduceOp::kSum));
    return std::vector<at::Tensor>{Normalized(sum, in[1], comm.size(), in.scalars[0].f)};
  }

  // The sum exact (fp64) and rounded once to the dtype: one of the orders the tolerance admits.
  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    const int w = static_cast<int>(all.size());
    at::Tensor total = at::zeros_like(all[0][0], at::kDouble);
    for (const auto& in : all) total += in[0].to(at::kDouble);
    at::Tensor sum = total.to(cfg.dtype);
    const int64_t chunk = sum.numel() / w;
    std::vector<std::vector<at::Tensor>> out;
    for (int r = 0; r < w; ++r) {
      out.push_back({Normalized(sum.narrow(0, r * chunk, chunk), all[r][1], w, kEps)});
    }
    return out;
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    const double u = UnitRoundoff(cfg.dtype);
    Tolerance t;
    t.atol =
        cfg.world == 1 ? 1e-2 : std::max(1e-2, 2 * u * std::sqrt(double(cfg.world)) * kGammaBound);
    t.rtol = 1e-2;
    t.rationale = absl::StrCat(
        "bf16-SUM hazard, as in problems 9, 13 and 16: the dtype sum of W unit-normal values "
        "(std sqrt(W)) depends on the order; each of the ~W roundings errs by up to u = 2^-8 "
        "of a partial sum, giving an absolute error of x = S/W up to ~2u, which the norm scales "
        "by rsqrt(mean x^2) ~ sqrt(W) and gamma (|gamma| < 4). atol = max(0.01, 2 u sqrt(W) 4) "
        "= ",
        t.atol, " at W = ", cfg.world,
        " (0.01 at W = 1: no sum), rtol = 0.01 (PKB's; the fp32 norm and the final rounding "
        "add < 1 ulp). A missing rank moves x by ~1/W (y by ~0.35 |gamma| at W = 8), LayerNorm "
        "shifts rows by mean(x)/rms ~ 0.09 |gamma|: both fail on many elements.");
    return t;
  }

  Roofline GetRoofline(const RunConfig& cfg) const override {
    const double b = ElementBytes(cfg.dtype);
    const double chunk = double(Rows(cfg)) * Hidden(cfg);
    Roofline r;
    r.nvlink_bytes = (cfg.world - 1) * chunk * b;
    r.hbm_bytes = (cfg.world * chunk + chunk + Hidden(cfg)) * b;
    r.flops = 5.0 * chunk + (cfg.world - 1) * chunk;
    r.collective_bytes = cfg.world * chunk * b;
    r.busbw_factor = AllGatherFactor(cfg.world);
    return r;
  }
};
PKB_REGISTER_PROBLEM(ReduceScatterRmsNorm);

}  // namespace
}  // namespace pkb
