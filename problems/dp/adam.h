// The Adam step and the two-layer MLP that problems 40 (DDP), 41 (ZeRO-1), 42 (ZeRO-2),
// 43 (sharded Adam + unshard) and 47 (FSDP step) share, written once with PKB's op order.
//
// The MLP: h = relu(X W1^T + b1), o = h W2^T + b2, loss = mean((o - y)^2), gradients by autograd
// in the run dtype, flattened in the order W1, b1, W2, b2 (torch._utils._flatten_dense_tensors).
// Every rank draws it from the shared seed 42 + 1000 p + 1000003 set: X_full and y_full, of
// which it keeps its own rows, then W1, b1, W2, b2 from the same stream, kept on rank 0 only
// (other ranks hold zeros, as in PKB).
//
// Adam (no weight decay; PKB's code, every op rounded to the dtype):
//   m = m * b1 + (1 - b1) g;  v = v * b2 + (1 - b2) g g;  m_hat = m / (1 - b1^step);
//   v_hat = v / (1 - b2^step);  d = m_hat / (sqrt(v_hat) + eps);  p = p + d * (-lr).
#ifndef PKB_PROBLEMS_DP_ADAM_H_
#define PKB_PROBLEMS_DP_ADAM_H_

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "problems/harness/common.h"
#include "problems/harness/problem.h"

namespace pkb::dp {

// PKB's optimizer scalars; every set keeps them except the step (1 + set mod 7, as PKB's trial)
// and, in the stronger sets of the MLP problems, the learning rate (see StrongLr).
struct AdamHyper {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  int64_t step = 1;
};

// Share of elements that may use the looser bound (see Tolerance::outlier_fraction).
constexpr double kOutlierFraction = 1e-3;

inline int64_t PkbStep(int set) { return 1 + set % 7; }

// Appends lr, beta1, beta2, eps (and weight_decay when `wd` >= 0), then step: PKB's order.
inline void AddHyper(Inputs& in, const AdamHyper& h, double wd = -1) {
  in.scalars.push_back(ScalarArg::Float("lr", h.lr));
  in.scalars.push_back(ScalarArg::Float("beta1", h.beta1));
  in.scalars.push_back(ScalarArg::Float("beta2", h.beta2));
  in.scalars.push_back(ScalarArg::Float("eps", h.eps));
  if (wd >= 0) in.scalars.push_back(ScalarArg::Float("weight_decay", wd));
  in.scalars.push_back(ScalarArg::Int("step", h.step));
}

inline double Scalar(const Inputs& in, const std::string& name) {
  for (const ScalarArg& a : in.scalars) {
    if (a.name == name) return a.f;
  }
  return std::nan("");
}

inline AdamHyper ReadHyper(const Inputs& in) {
  AdamHyper h;
  h.lr = Scalar(in, "lr");
  h.beta1 = Scalar(in, "beta1");
  h.beta2 = Scalar(in, "beta2");
  h.eps = Scalar(in, "eps");
  h.step = static_cast<int64_t>(Scalar(in, "step"));
  return h;
}

// Updates m and v in place from the gradient g and returns the direction
// m_hat / (sqrt(v_hat) + eps), each op rounded to the dtype in PKB's order.
inline at::Tensor AdamDirection(at::Tensor& m, at::Tensor& v, const at::Tensor& g,
                                const AdamHyper& h) {
  const double bc1 = 1.0 - std::pow(h.beta1, static_cast<double>(h.step));
  const double bc2 = 1.0 - std::pow(h.beta2, static_cast<double>(h.step));
  m.mul_(h.beta1).add_(g, 1.0 - h.beta1);
  v.mul_(h.beta2).addcmul_(g, g, 1.0 - h.beta2);
  at::Tensor m_hat = m / bc1;
  at::Tensor v_hat = v / bc2;
  return m_hat.div(v_hat.sqrt().add(h.eps));
}

// The update of 40-43: p += (direction * (-lr)), the product rounded before the sum.
inline void AdamUpdate(at::Tensor& p, at::Tensor& m, at::Tensor& v, const at::Tensor& g,
                       const AdamHyper& h) {
  p.add_(AdamDirection(m, v, g, h).mul(-h.lr));
}

// The stronger input sets (set > 0) start Adam from a state PKB never tests: the moments after
// one earlier step with a gradient h = scale * randn(shape), m = (1 - b1) h and
// v = (1 - b2) h h (each op in the dtype). A candidate that ignores its incoming moments (PKB's
// are zeros) then fails, and the update m_hat / sqrt(v_hat) is no longer the sign of g.
struct Moments {
  at::Tensor m, v;
};
inline Moments HistoryOf(const at::Tensor& g, const AdamHyper& h) {
  return {g * (1.0 - h.beta1), g * g * (1.0 - h.beta2)};
}
inline Moments DrawHistory(const RunConfig& cfg, at::IntArrayRef shape, double scale,
                           const AdamHyper& h) {
  return HistoryOf(at::randn(shape, Opts(cfg)) * scale, h);
}

// Statement fragments shared by the problems' markdown.
inline constexpr char kAdamFormula[] =
    "  m = m * beta1 + (1 - beta1) g; v = v * beta2 + (1 - beta2) g g;\n"
    "  m_hat = m / (1 - beta1^step); v_hat = v / (1 - beta2^step);\n"
    "  p = p + (m_hat / (sqrt(v_hat) + eps)) * (-lr)  (the quotient, then the product, then the\n"
    "  sum rounded to the dtype; Python-float scalars).\n";
inline constexpr char kShardedSizes[] =
    "- Sizes: n_tot = ceil(max(M, W) / W) * W rows, c = n_tot / W per rank;\n"
    "  d_in = clamp(N, 16, 256), d_out = clamp(N / 4, 8, 256), hid the smallest h >=\n"
    "  clamp(N / 2, 32, 512) (of the 1024 PKB tries) with W | P = h d_in + h + d_out h + d_out\n"
    "  (hid = 512, P = 262912 = 2^8 * 1027 at the default N, so W must be a power of two <= 256\n"
    "  there; CanImplement rejects the rest).\n";
inline constexpr char kZeroInputs[] =
    "- Inputs (shared seed 42 + 1000 id + 1000003*set on EVERY rank, drawn in this order on\n"
    "  the device, run dtype): X_full (n_tot, d_in) and y_full (n_tot, d_out) randn; rank r\n"
    "  gets `X_local`, `y_local` = rows [r c, (r+1) c). Then, on rank 0 only, `W1` (hid,\n"
    "  d_in), `b1` (hid), `W2` (d_out, hid), `b2` (d_out) randn; other ranks hold zeros.\n"
    "  `exp_avg_part`, `exp_avg_sq_part` (P/W): zeros (PKB's set 0). In the other sets every\n"
    "  rank draws the four parameters (ranks > 0 then zero them, keeping the streams aligned),\n"
    "  then H = randn(P), each tensor's part times the RMS of that tensor's gradient over all\n"
    "  n_tot rows at rank 0's parameters, and holds exp_avg_part = 0.1 H, exp_avg_sq_part =\n"
    "  0.001 H H, slice [r P/W, (r+1) P/W) (the state after one earlier step).\n"
    "  Scalars: lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, step = 1 + set mod 7.\n";
inline constexpr char kStepTolerances[] =
    "- Tolerances (u = 2^-8 in bf16): PKB's atol = 1e-2 passes the unchanged parameters (the\n"
    "  step is ~lr = 1e-3). Parameters: |d| <= 16 u lr + 2u |expected|, except that up to\n"
    "  0.1% of the elements may be within 2.5 lr + 2u |expected|: from zero moments Adam's first\n"
    "  step is lr * sign(g), and where the averaged gradient is zero within rounding another\n"
    "  reduction order or GEMM may flip that sign. exp_avg (m): rtol = 8u, atol = 4u max(W, 2)\n"
    "  times the mean |expected| of the output's nonzero elements. exp_avg_sq (v): rtol = 12u,\n"
    "  atol = 8u max(W, 2) times that mean. PKB's atol = 1e-2 is as large as the moments\n"
    "  themselves at the default shape (v is ~1e-3 g^2): it would pass zeros, a rank left out or\n"
    "  a sum instead of a mean. The scaled atol: a bf16 reduction in another order moves the\n"
    "  mean gradient by up to ~W/2 ulps of its partial sums, many ulps where the sum cancels.\n";

// The MLP's sizes at the run's shape.
struct MlpShape {
  int64_t n_tot = 0;  // rows of X_full, a multiple of W
  int64_t chunk = 0;  // rows per rank
  int64_t d_in = 0, hid = 0, d_out = 0;
  int64_t numel() const { return hid * d_in + hid + d_out * hid + d_out; }
  std::vector<std::vector<int64_t>> ParamShapes() const {
    return {{hid, d_in}, {hid}, {d_out, hid}, {d_out}};
  }
};

// Forward and backward FLOPs of one rank's rows.
inline double MlpFlops(const MlpShape& s) {
  return 6.0 * s.chunk * (s.d_in * s.hid + s.hid * s.d_out);
}

inline int64_t Clamp(int64_t x, int64_t lo, int64_t hi) { return std::max(lo, std::min(x, hi)); }

// Problem 40's sizes: hid = clamp(N / 2, 32, 512), any W.
inline MlpShape DdpShape(const RunConfig& cfg) {
  MlpShape s;
  s.n_tot = (std::max<int64_t>(cfg.m, cfg.world) + cfg.world - 1) / cfg.world * cfg.world;
  s.chunk = s.n_tot / cfg.world;
  s.d_in = Clamp(cfg.n, 16, 256);
  s.hid = Clamp(cfg.n / 2, 32, 512);
  s.d_out = Clamp(cfg.n / 4, 8, 256);
  return s;
}

// The sharded problems' sizes (41, 42, 47): hid grows from problem 40's value until W divides
// the parameter count; PKB tries 1024 values and raises otherwise (any W divisible by 3 at the
// default N, since P = 513 hid + 256 there).
inline absl::StatusOr<MlpShape> ShardedShape(const RunConfig& cfg) {
  MlpShape s = DdpShape(cfg);
  for (int tries = 0; tries < 1024; ++tries, ++s.hid) {
    if (s.numel() % cfg.world == 0) return s;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("the MLP's parameter count hid*(d_in + 1 + d_out) + d_out (d_in = ", s.d_in,
                   ", d_out = ", s.d_out, ") is not divisible by W = ", cfg.world,
                   " for any of the 1024 ", "hidden sizes PKB tries from ", DdpShape(cfg).hid,
                   " (ZeRO shards the flat parameters "
                   "into W equal parts)"));
}

struct MlpDraw {
  at::Tensor x_full, y_full;       // every rank's rows
  at::Tensor x, y;                 // this rank's rows (chunk, d_in) and (chunk, d_out)
  std::vector<at::Tensor> params;  // W1, b1, W2, b2: random on rank 0, zeros elsewhere
  std::vector<at::Tensor> model;   // the drawn W1..b2 (empty where this rank drew none)
};

// Who holds random parameters. PKB: rank 0 draws W1, b1, W2, b2 and the other ranks hold zeros
// without drawing. The stronger sets keep every rank's stream aligned for what it draws next:
// every rank draws them, then ranks > 0 zero them (kAligned) or keep them (kShared, 47).
enum class ParamDraw { kPkb, kAligned, kShared };

// X_full, y_full (randn in the dtype on the device), this rank's rows, then the parameters
// (randn) continuing the stream. The caller has seeded with the shared seed.
inline MlpDraw DrawMlp(const RunConfig& cfg, const MlpShape& s, int rank,
                       ParamDraw who = ParamDraw::kPkb) {
  at::Tensor x_full = at::randn({s.n_tot, s.d_in}, Opts(cfg));
  at::Tensor y_full = at::randn({s.n_tot, s.d_out}, Opts(cfg));
  MlpDraw d;
  d.x_full = x_full;
  d.y_full = y_full;
  d.x = x_full.narrow(0, rank * s.chunk, s.chunk).contiguous();
  d.y = y_full.narrow(0, rank * s.chunk, s.chunk).contiguous();
  for (const auto& shape : s.ParamShapes()) {
    if (rank == 0 || who != ParamDraw::kPkb) {
      d.model.push_back(at::randn(shape, Opts(cfg)));
      d.params.push_back(rank == 0 || who == ParamDraw::kShared ? d.model.back()
                                                                 : at::zeros(shape, Opts(cfg)));
    } else {
      d.params.push_back(at::zeros(shape, Opts(cfg)));
    }
  }
  return d;
}

inline at::Tensor Flatten(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> flat;
  for (const auto& t : ts) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

inline std::vector<at::Tensor> Unflatten(const at::Tensor& flat,
                                         const std::vector<std::vector<int64_t>>& shapes) {
  std::vector<at::Tensor> out;
  int64_t offset = 0;
  for (const auto& shape : shapes) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    out.push_back(flat.narrow(0, offset, n).view(shape).clone());
    offset += n;
  }
  return out;
}

// This rank's flat gradient of the MSE loss (autograd in the dtype, as PKB's loss.backward()).
inline at::Tensor LocalGrad(const at::Tensor& x, const at::Tensor& y,
                            const std::vector<at::Tensor>& params) {
  c10::AutoGradMode enable(true);
  std::vector<at::Tensor> leaves;
  for (const auto& p : params) leaves.push_back(p.detach().clone().requires_grad_(true));
  at::Tensor h = at::relu(at::linear(x, leaves[0], leaves[1]));
  at::Tensor o = at::linear(h, leaves[2], leaves[3]);
  at::mse_loss(o, y).backward();
  std::vector<at::Tensor> grads;
  for (const auto& l : leaves) grads.push_back(l.grad());
  return Flatten(grads).detach();
}

// The MLP problems' earlier step (sets > 0): H = randn(P), each parameter tensor's part scaled by
// the RMS of that tensor's gradient over all rows (the averaged gradient of this step, which
// every rank can compute from X_full and y_full), so the earlier step and this one weigh alike
// in every tensor (a bias's gradient is far smaller than a weight's). Returns the flat m and v.
inline Moments MlpHistory(const RunConfig& cfg, const MlpShape& s, const MlpDraw& d,
                          const AdamHyper& h) {
  at::Tensor noise = at::randn({s.numel()}, Opts(cfg));
  const at::Tensor g = LocalGrad(d.x_full, d.y_full, d.model).to(at::kFloat);
  int64_t offset = 0;
  for (const auto& shape : s.ParamShapes()) {
    int64_t n = 1;
    for (int64_t k : shape) n *= k;
    const double rms = g.narrow(0, offset, n).pow(2).mean().sqrt().item<double>();
    noise.narrow(0, offset, n).mul_(std::max(rms, 1e-3));
    offset += n;
  }
  return HistoryOf(noise, h);
}

// Problems 41 and 42 (ZeRO-1, ZeRO-2): the MLP draw with hid from ShardedShape, then this rank's
// `exp_avg_part` and `exp_avg_sq_part` (P / W): zeros in PKB's set 0; in the stronger sets slice
// r of a history over all P parameters drawn on every rank (MlpHistory).
inline Inputs ZeroInputs(const RunConfig& cfg, const MlpShape& s, int rank, int set) {
  MlpDraw d = DrawMlp(cfg, s, rank, set > 0 ? ParamDraw::kAligned : ParamDraw::kPkb);
  const int64_t part = s.numel() / cfg.world;
  AdamHyper h;
  h.step = PkbStep(set);
  Moments mv{at::zeros({part}, Opts(cfg)), at::zeros({part}, Opts(cfg))};
  if (set > 0) {
    Moments all = MlpHistory(cfg, s, d, h);
    mv = {all.m.narrow(0, rank * part, part).contiguous(),
          all.v.narrow(0, rank * part, part).contiguous()};
  }
  Inputs in;
  in.Add("X_local", d.x);
  in.Add("y_local", d.y);
  const char* names[] = {"W1", "b1", "W2", "b2"};
  for (int k = 0; k < 4; ++k) in.Add(names[k], d.params[k]);
  in.Add("exp_avg_part", mv.m);
  in.Add("exp_avg_sq_part", mv.v);
  AddHyper(in, h);
  return in;
}

inline std::vector<OutputDecl> ZeroOutputs(const RunConfig& cfg, const MlpShape& s) {
  const auto shapes = s.ParamShapes();
  const int64_t part = s.numel() / cfg.world;
  return {{"W1", shapes[0], cfg.dtype},        {"b1", shapes[1], cfg.dtype},
          {"W2", shapes[2], cfg.dtype},        {"b2", shapes[3], cfg.dtype},
          {"exp_avg_part", {part}, cfg.dtype}, {"exp_avg_sq_part", {part}, cfg.dtype}};
}

// The mean over ranks of the flat gradients, summed exactly (fp64 holds any sum of W dtype
// values) and rounded once, then divided by W in the dtype as PKB does.
inline at::Tensor MeanOfRanks(const std::vector<at::Tensor>& grads) {
  at::Tensor sum = at::zeros_like(grads[0], at::kDouble);
  for (const auto& g : grads) sum += g.to(at::kDouble);
  return sum.to(grads[0].scalar_type()).div_(static_cast<int64_t>(grads.size()));
}

// 41 and 42 after the gradient reduction: rank r's Adam on slice r of the flat parameters and
// of `mean` (the averaged flat gradient), then the gathered parameters. Rank r's outputs.
inline std::vector<std::vector<at::Tensor>> ZeroOracle(const std::vector<Inputs>& all,
                                                       const MlpShape& s) {
  const std::vector<at::Tensor> params = {all[0][2], all[0][3], all[0][4], all[0][5]};
  std::vector<at::Tensor> grads;
  for (const auto& in : all) grads.push_back(LocalGrad(in[0], in[1], params));
  const at::Tensor mean = MeanOfRanks(grads), flat = Flatten(params);
  const int64_t part = s.numel() / static_cast<int64_t>(all.size());
  std::vector<at::Tensor> slices, ms, vs;
  for (size_t r = 0; r < all.size(); ++r) {
    at::Tensor w = flat.narrow(0, r * part, part).clone();
    at::Tensor m = all[r][6].clone(), v = all[r][7].clone();
    AdamUpdate(w, m, v, mean.narrow(0, r * part, part), ReadHyper(all[r]));
    slices.push_back(w);
    ms.push_back(m);
    vs.push_back(v);
  }
  const auto gathered = Unflatten(at::cat(slices), s.ParamShapes());
  std::vector<std::vector<at::Tensor>> out;
  for (size_t r = 0; r < all.size(); ++r) {
    out.push_back(gathered);
    out.back().push_back(ms[r]);
    out.back().push_back(vs[r]);
  }
  return out;
}

// Updated parameters. PKB rounds each of ~8 ops of the step d = lr * m_hat / (sqrt(v_hat) + eps)
// (<= ~8u of |d| <= ~1.05 lr for the states the sets draw); a fused kernel rounds once: atol
// 16 u lr. The output's own rounding may go either way: rtol = `roundings` u (2, 3 for 47's
// second axpy). With `flips`, the gradient is reduced across ranks and up to 0.1% of elements
// may instead be within 2.5 lr: a step's sign where the averaged gradient is zero within rounding.
inline Tolerance ParamTolerance(const RunConfig& cfg, double lr, bool flips, int roundings = 2) {
  const double u = UnitRoundoff(cfg.dtype);
  Tolerance t;
  t.atol = 16 * u * lr;
  t.rtol = roundings * u;
  t.rationale = absl::StrCat(
      "parameters after the Adam step: atol = 16 u lr = ", t.atol, ", rtol = ", roundings,
      "u = ", t.rtol,
      " (u = unit roundoff of the dtype). PKB rounds each of ~8 ops of the step "
      "(<= ~8u of a step <= ~1.05 lr), a fused kernel rounds once, and the output's rounding "
      "may go either way. PKB's atol = 1e-2 would pass the parameters without any update (the "
      "step is ~lr = 1e-3); this bound rejects that, a wrong step count or bias correction, "
      "and ignored incoming moments.");
  if (flips) {
    t.outlier_fraction = kOutlierFraction;
    t.outlier_atol = 2.5 * lr;
    t.outlier_rtol = roundings * u;
    absl::StrAppend(
        &t.rationale, " Up to 0.1% of the elements may instead be within 2.5 lr + ", roundings,
        "u |expected|: from zero moments Adam's step is lr * sign(g), and where the averaged "
        "gradient is zero within rounding another reduction order or GEMM flips that sign (~20 "
        "of 262912 elements at W = 8, measured between a ring order and an exact sum).");
  }
  return t;
}

// The updated moments. m = b1 m_in + (1 - b1) g and v = b2 v_in + (1 - b2) g^2 carry the averaged
// gradient. A bf16 reduction rounds at every hop: another order moves the mean by up to ~W/2
// ulps of the partial sums, which are larger than the mean where the ranks' gradients cancel
// (measured: 9 ulps of m, 15% of an element, between MPI's ring and an exact sum at W = 8). That
// error follows the size of the output's typical element, not its own: atol_mean_abs, growing
// with W. At W = 1 it covers another GEMM (autograd in fp64, or in another order).
inline double ReductionSlack(const RunConfig& cfg) {
  return 4 * UnitRoundoff(cfg.dtype) * std::max(cfg.world, 2);
}

inline Tolerance ExpAvgTolerance(const RunConfig& cfg) {
  const double u = UnitRoundoff(cfg.dtype);
  Tolerance t;
  t.atol = 0;
  t.rtol = 8 * u;
  t.atol_mean_abs = ReductionSlack(cfg);
  t.rationale = absl::StrCat(
      "exp_avg (m) after the step: rtol = 8u = ", t.rtol, ", atol = 4u max(W, 2) = ",
      t.atol_mean_abs,
      " times the mean |expected| of the output's nonzero elements (u = unit roundoff of the "
      "dtype). A correct candidate's error is a few ulps of rounding (another op order, fp32 "
      "math rounded once) plus the averaged gradient's: a bf16 reduction in another order "
      "moves it by up to ~W/2 ulps of the partial sums, which is many ulps of an element "
      "whose sum cancels (the scaled atol). PKB's atol = 1e-2 is as large as m itself where "
      "gradients are small (the default shape) and passes noise where m is zero. A sum "
      "instead of a mean, a rank left out or ignored incoming moments move m by far more.");
  return t;
}

// v is ~1e-3 g^2 from PKB's zero state, so PKB's atol = 1e-2 passes anything of that size at
// the default shape (zeros, a rank left out, a sum): the bound here is relative to v itself and
// to the output's typical |v|. v's relative error is twice g's.
inline Tolerance ExpAvgSqTolerance(const RunConfig& cfg) {
  const double u = UnitRoundoff(cfg.dtype);
  Tolerance t;
  t.atol = 0;
  t.rtol = 12 * u;
  t.atol_mean_abs = 2 * ReductionSlack(cfg);
  t.rationale = absl::StrCat(
      "exp_avg_sq (v) after the step: rtol = 12u = ", t.rtol, ", atol = 8u max(W, 2) = ",
      t.atol_mean_abs,
      " times the mean |expected| of the output's nonzero elements (u = unit roundoff of the "
      "dtype). v = beta2 v_in + (1 - beta2) g^2 is ~1e-3 g^2, so PKB's atol = 1e-2 would pass "
      "zeros, a rank left out or a sum instead of a mean at the default shape. A correct "
      "candidate's error is a few ulps of rounding plus twice the averaged gradient's relative "
      "error (another reduction order or GEMM; the scaled atol where its sum cancels).");
  return t;
}

// 41 and 42: W1, b1, W2, b2, exp_avg_part, exp_avg_sq_part.
inline Tolerance ZeroTolerance(const RunConfig& cfg, int index) {
  if (index < 4) return ParamTolerance(cfg, AdamHyper{}.lr, /*flips=*/true);
  return index == 4 ? ExpAvgTolerance(cfg) : ExpAvgSqTolerance(cfg);
}

}  // namespace pkb::dp

#endif  // PKB_PROBLEMS_DP_ADAM_H_
