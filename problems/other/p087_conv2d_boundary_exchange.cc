// Problem 87 — patch-parallel (DistriFusion-style) 3x3 convolution of an SD-UNet latent: the
// image is cut into row bands across WORLD, and each band needs one halo row from each neighbour.
#include "absl/strings/str_cat.h"
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

constexpr int64_t kLatent = 128;  // PKB's latent side (height and width)

struct Dims {
  int64_t c, hl, width;  // channels, local rows, width
};

// PKB: C = (320, 640, 1280)[min(N/512, 2)], Hl = max(3, 128 / max(1, W/2)), width 128. M < 1024
// shrinks C and the latent side in proportion, for quick tests (PKB ignores M; M >= 1024, the
// default, is PKB's problem).
Dims Sizes(const RunConfig& cfg) {
  static constexpr int64_t kChannels[] = {320, 640, 1280};
  const int64_t scale = std::min<int64_t>(cfg.m, 1024);
  const int64_t c =
      std::max<int64_t>(1, kChannels[std::min<int64_t>(cfg.n / 512, 2)] * scale / 1024);
  const int64_t side = std::max<int64_t>(1, kLatent * scale / 1024);
  const int64_t hl = std::max<int64_t>(3, side / std::max(1, cfg.world / 2));
  return {c, hl, side};
}

class Conv2dBoundaryExchange : public Problem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        87,
        "87_conv2d_boundary_exchange",
        1,
        "patch-parallel (DistriFusion-style) SD-UNet conv2d with a halo exchange",
        "other (spatial patch parallelism)",
        R"md(A 3x3 convolution (stride 1, padding 1) of an image cut into row bands: rank r holds
rows [r Hl, (r+1) Hl) of a conceptual (1, C, W Hl, 128) image, as a chain over WORLD
(rank 0 on top, rank W-1 at the bottom, no wrap-around).

- Sizes: C = (320, 640, 1280)[min(N/512, 2)] (1280 at the defaults), Hl = max(3,
  128 / max(1, W/2)) (32 at W = 8), width 128. PKB sizes Hl for W/2 devices per image
  but chains all W ranks. PKB ignores M; here M < 1024 shrinks C and the 128 latent
  side by M/1024 for quick tests (M >= 1024, the default, is PKB's problem). Any W.
- Inputs per rank r, randn in the run dtype on the
  device, in order: `x` (1, C, Hl, 128), `weight` (C, C, 3, 3), `bias` (C). Every rank
  convolves with ITS OWN weight and bias. Non-tensor: stride = 1, padding = 1.
- Computation: W = 1: conv2d(x, weight, bias, padding 1). Otherwise the top halo is
  rank r-1's last row (zeros on rank 0) and the bottom halo rank r+1's first row
  (zeros on rank W-1); y = conv2d(top ++ x ++ bottom along H, weight, bias), padded by
  1 in width only. PKB all-gathers every rank's [first row, last row]; only the two
  neighbours' rows are needed.
- Output: `y` (1, C, Hl, 128) run dtype.
- Tolerance: PKB's atol = rtol = 1e-2. |y| ~ sqrt(9C) ~ 100 with fp32 accumulation
  and one rounding (bf16 ulp 0.5 there, 2.5 ulps allowed); missing, swapped or wrapped
  halos change the edge rows by ~sqrt(3C) and fail.
- Traffic: 2 rows of C x 128 per rank (one to each neighbour); FLOPs 2 C^2 9 Hl 128.)md"};
    return i;
  }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    return RequirePositiveShape(cfg);
  }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    const Dims d = Sizes(cfg);
    Inputs in;
    in.Add("x", at::randn({1, d.c, d.hl, d.width}, Opts(cfg)));
    in.Add("weight", at::randn({d.c, d.c, 3, 3}, Opts(cfg)));
    in.Add("bias", at::randn({d.c}, Opts(cfg)));
    in.scalars.push_back(ScalarArg::Int("stride", 1));
    in.scalars.push_back(ScalarArg::Int("padding", 1));
    return in;
  }

  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    const Dims d = Sizes(cfg);
    return {{"y", {1, d.c, d.hl, d.width}, cfg.dtype}};
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    const int w = comm.size(), r = comm.rank();
    const at::Tensor &x = in[0], &weight = in[1], &bias = in[2];
    if (w == 1) return std::vector<at::Tensor>{at::conv2d(x, weight, bias, 1, 1)};
    const int64_t hl = x.size(2);
    at::Tensor local = at::stack({x.narrow(2, 0, 1), x.narrow(2, hl - 1, 1)}).contiguous();
    at::Tensor rows = at::empty({w, 2, 1, x.size(1), 1, x.size(3)}, x.options());
    PKB_RETURN_IF_ERROR(comm.AllGatherInto(rows, local));
    at::Tensor zero = at::zeros_like(local[0]);
    at::Tensor top = r == 0 ? zero : rows[r - 1][1];
    at::Tensor bottom = r == w - 1 ? zero : rows[r + 1][0];
    at::Tensor padded = at::cat({top, x, bottom}, 2);
    return std::vector<at::Tensor>{
        at::conv2d(padded, weight, bias, 1, at::IntArrayRef({0, 1})).contiguous()};
  }

  // The whole image stacked along H with a zero row above and below; rank r's band with one row
  // either side, convolved with rank r's weight in fp32 and rounded once.
  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    std::vector<at::Tensor> bands;
    for (const auto& in : all) bands.push_back(in[0].to(at::kFloat));
    at::Tensor image = at::constant_pad_nd(at::cat(bands, 2), {0, 0, 1, 1});
    const int64_t hl = all[0][0].size(2);
    std::vector<std::vector<at::Tensor>> out;
    for (int r = 0; r < cfg.world; ++r) {
      at::Tensor band = image.narrow(2, r * hl, hl + 2);
      at::Tensor y = at::conv2d(band, all[r][1].to(at::kFloat), all[r][2].to(at::kFloat), 1,
                                at::IntArrayRef({0, 1}));
      out.push_back({y.to(cfg.dtype)});
    }
    return out;
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    Tolerance t;
    t.rationale =
        "PKB's atol = rtol = 1e-2. Each output sums 9C products (|y| ~ sqrt(9C) ~ 100 at C = "
        "1280) in fp32 and rounds once: any accumulation order or an implicit GEMM stays within "
        "an ulp (0.5 at |y| ~ 100, where the bound is ~1). Missing, swapped or wrapped halos "
        "change the edge rows by ~sqrt(3C) and fail.";
    return t;
  }

  Roofline GetRoofline(const RunConfig& cfg) const override {
    const Dims d = Sizes(cfg);
    const double b = ElementBytes(cfg.dtype), c = d.c, hl = d.hl, wd = d.width;
    Roofline r;
    r.nvlink_bytes = cfg.world > 1 ? 2 * c * wd * b : 0;
    r.hbm_bytes = (2 * c * hl * wd + 9 * c * c + c) * b;
    r.flops = 2 * c * c * 9 * hl * wd;
    return r;
  }
};
PKB_REGISTER_PROBLEM(Conv2dBoundaryExchange);

}  // namespace
}  // namespace pkb
