// Problem 76 — Open-Sora's Conv3d split over input channels across WORLD: every rank convolves
// its channel slice with its weight slice and the partial outputs are all-reduced, then biased.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

constexpr int64_t kKernel = 3;

struct Dims {
  int64_t cout, cl, t, h;  // output channels, input channels per rank, input time, input side
};

// PKB: Cout = the first of 512, 256, 128 that W divides (else 512), Cl = Cout / W (floor),
// x (1, Cl, 19, 66, 66), whatever M and N. Here M < 1024 shrinks Cout by M/1024 and N < 1024
// shrinks the output's 17 x 64 x 64 by N/1024, for quick tests (M, N >= 1024, the default, is
// PKB's problem).
Dims Sizes(const RunConfig& cfg) {
  int64_t cout = 512;
  for (int64_t c : {512, 256, 128}) {
    if (c % cfg.world == 0) {
      cout = c;
      break;
    }
  }
  cout = std::max<int64_t>(1, cout * std::min<int64_t>(cfg.m, 1024) / 1024);
  const int64_t n = std::min<int64_t>(cfg.n, 1024);
  return {cout, cout / cfg.world, 2 + std::max<int64_t>(1, 17 * n / 1024),
          2 + std::max<int64_t>(1, 64 * n / 1024)};
}

// A partial's std: sqrt(27 Cl) products of two N(0, 1) draws.
double PartialStd(const Dims& d) { return std::sqrt(27.0 * d.cl); }

class OpenSoraConv3dAllReduce : public Problem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        76,
        "76_opensora_conv3d_allreduce",
        1,
        "Open-Sora Conv3d split over input channels, then all-reduce",
        "tensor parallel",
        R"md(A valid 3x3x3 Conv3d whose input channels are split across WORLD.

- Sizes: Cout = the first of 512, 256, 128 that W divides, else 512 (512 for every
  W <= 8); Cl = floor(Cout / W) input channels per rank; x (1, Cl, 19, 66, 66), output
  (1, Cout, 17, 64, 64). PKB ignores M, N; here M < 1024 shrinks Cout by M/1024 and
  N < 1024 the 17 x 64 x 64 output by N/1024, for quick tests (M, N >= 1024, the
  default, is PKB's problem). Any W with Cl >= 1.
- Inputs per rank r, in the run dtype on the
  device, in order: `x` = randn(1, Cl, T, H, H), `weight` = randn(Cout, Cl, 3, 3, 3),
  `bias` = linspace(-0.1, 0.1, Cout) (no RNG, the same on every rank). Non-tensor:
  stride 1, padding 0, dilation 1, groups 1.
- Computation: partial = conv3d(x, weight) in the dtype (fp32 accumulation, one
  rounding), all-reduce SUM in the dtype over WORLD, then + bias[o].
- Output: `y` (1, Cout, T-2, H-2, H-2) run dtype, identical on every rank.
- Tolerance: PKB's 1e-2 is too tight: each partial (std sqrt(27 Cl) ~ 42 at W = 8) is
  rounded to bf16 and NCCL sums in bf16 in its own order, so near-zero outputs carry
  errors ~0.3-1. atol = 2 u sqrt(27 Cl) W sqrt(W) (u = 2^-8 for bf16; 7.4 at W = 8)
  and rtol = 1e-2 admit any reduction order, fp32 reduction or a fused GEMM +
  reduce-scatter; a missing rank (error ~ N(0, 27 Cl)) still fails on most elements.
- Traffic: an all-reduce of Cout x 17 x 64 x 64 elements (2(W-1)/W of it per rank);
  FLOPs 2 Cout Cl 27 17 64 64 (123 G at W = 8).)md"};
    return i;
  }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    PKB_RETURN_IF_ERROR(RequirePositiveShape(cfg));
    const Dims d = Sizes(cfg);
    if (d.cl < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "76_opensora_conv3d_allreduce gives each rank floor(Cout / W) input channels; Cout = ",
          d.cout, " leaves none at W = ", cfg.world));
    }
    return absl::OkStatus();
  }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    const Dims d = Sizes(cfg);
    Inputs in;
    in.Add("x", at::randn({1, d.cl, d.t, d.h, d.h}, Opts(cfg)));
    in.Add("weight", at::randn({d.cout, d.cl, kKernel, kKernel, kKernel}, Opts(cfg)));
    in.Add("bias", at::linspace(-0.1, 0.1, d.cout, Opts(cfg)));
    in.scalars.push_back(ScalarArg::Int("stride", 1));
    in.scalars.push_back(ScalarArg::Int("padding", 0));
    in.scalars.push_back(ScalarArg::Int("dilation", 1));
    in.scalars.push_back(ScalarArg::Int("groups", 1));
    return in;
  }

  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    const Dims d = Sizes(cfg);
    return {{"y", {1, d.cout, d.t - 2, d.h - 2, d.h - 2}, cfg.dtype}};
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    at::Tensor partial = at::conv3d(in[0], in[1]).contiguous();
    PKB_RETURN_IF_ERROR(comm.AllReduce(partial, ReduceOp::kSum));
    return std::vector<at::Tensor>{partial + in[2].view({1, -1, 1, 1, 1})};
  }

  // Each partial rounded to the dtype as the reference does, summed exactly (fp64) and rounded
  // once, then biased in the dtype: one of the orders the tolerance admits.
  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    at::Tensor sum;
    for (const auto& in : all) {
      at::Tensor p = at::conv3d(in[0].to(at::kFloat), in[1].to(at::kFloat)).to(cfg.dtype);
      sum = sum.defined() ? sum + p.to(at::kDouble) : p.to(at::kDouble);
    }
    at::Tensor y = sum.to(cfg.dtype) + all[0][2].view({1, -1, 1, 1, 1});
    return std::vector<std::vector<at::Tensor>>(all.size(), {y});
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    const Dims d = Sizes(cfg);
    const double w = cfg.world, sigma = PartialStd(d);
    Tolerance t;
    t.atol = std::max(1e-2, 2.0 * UnitRoundoff(cfg.dtype) * sigma * w * std::sqrt(w));
    t.rtol = 1e-2;
    t.rationale = absl::StrCat(
        "bf16-SUM hazard (catalog): the sum of W dtype-rounded partials (std sqrt(27 Cl) = ", sigma,
        " each) depends on the summation order. Each of the ~2W roundings (W partials, "
        "W-1 hops) errs by up to u (2^-8 for bf16) of a running sum up to ~sqrt(W) sigma, so "
        "atol = 2 u sigma W sqrt(W) = ",
        t.atol, " at W = ", cfg.world,
        " (as problems 13 and 16), rtol = 1e-2 for the bias add's rounding. Any ring start, "
        "reversed or tree order, an fp32 reduction pass; a missing rank (error ~ N(0, sigma^2)) "
        "fails on most elements.");
    return t;
  }

  Roofline GetRoofline(const RunConfig& cfg) const override {
    const Dims d = Sizes(cfg);
    const double b = ElementBytes(cfg.dtype);
    const double out = double(d.cout) * (d.t - 2) * (d.h - 2) * (d.h - 2);
    Roofline r;
    r.nvlink_bytes = AllReduceFactor(cfg.world) * out * b;
    r.hbm_bytes = (double(d.cl) * d.t * d.h * d.h + 27.0 * d.cout * d.cl + 2 * out) * b;
    r.flops = 2.0 * out * d.cl * 27;
    r.collective_bytes = out * b;
    r.busbw_factor = AllReduceFactor(cfg.world);
    return r;
  }
};
PKB_REGISTER_PROBLEM(OpenSoraConv3dAllReduce);

}  // namespace
}  // namespace pkb
