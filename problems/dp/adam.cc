#include "problems/dp/adam.h"

#include <c10/core/GradMode.h>

namespace pkb::dp {

int64_t PkbStep(int set) { return 1 + set % 7; }

void AddHyper(Inputs& in, const AdamHyper& h, double wd) {
  in.scalars.push_back(ScalarArg::Float("lr", h.lr));
  in.scalars.push_back(ScalarArg::Float("beta1", h.beta1));
  in.scalars.push_back(ScalarArg::Float("beta2", h.beta2));
  in.scalars.push_back(ScalarArg::Float("eps", h.eps));
  if (wd >= 0) in.scalars.push_back(ScalarArg::Float("weight_decay", wd));
  in.scalars.push_back(ScalarArg::Int("step", h.step));
}

double Scalar(const Inputs& in, const std::string& name) {
  for (const ScalarArg& a : in.scalars) {
    if (a.name == name) return a.f;
  }
  return std::nan("");
}

AdamHyper ReadHyper(const Inputs& in) {
  AdamHyper h;
  h.lr = Scalar(in, "lr");
  h.beta1 = Scalar(in, "beta1");
  h.beta2 = Scalar(in, "beta2");
  h.eps = Scalar(in, "eps");
  h.step = static_cast<int64_t>(Scalar(in, "step"));
  return h;
}

at::Tensor AdamDirection(at::Tensor& m, at::Tensor& v, const at::Tensor& g, const AdamHyper& h) {
  const double bc1 = 1.0 - std::pow(h.beta1, static_cast<double>(h.step));
  const double bc2 = 1.0 - std::pow(h.beta2, static_cast<double>(h.step));
  m.mul_(h.beta1).add_(g, 1.0 - h.beta1);
  v.mul_(h.beta2).addcmul_(g, g, 1.0 - h.beta2);
  at::Tensor m_hat = m / bc1;
  at::Tensor v_hat = v / bc2;
  return m_hat.div(v_hat.sqrt().add(h.eps));
}

void AdamUpdate(at::Tensor& p, at::Tensor& m, at::Tensor& v, const at::Tensor& g,
                const AdamHyper& h) {
  p.add_(AdamDirection(m, v, g, h).mul(-h.lr));
}

Moments HistoryOf(const at::Tensor& g, const AdamHyper& h) {
  return {g * (1.0 - h.beta1), g * g * (1.0 - h.beta2)};
}

Moments DrawHistory(const RunConfig& cfg, at::IntArrayRef shape, double scale, const AdamHyper& h) {
  return HistoryOf(at::randn(shape, Opts(cfg)) * scale, h);
}

double MlpFlops(const MlpShape& s) { return 6.0 * s.chunk * (s.d_in * s.hid + s.hid * s.d_out); }

int64_t Clamp(int64_t x, int64_t lo, int64_t hi) { return std::max(lo, std::min(x, hi)); }

MlpShape DdpShape(const RunConfig& cfg) {
  MlpShape s;
  s.n_tot = (std::max<int64_t>(cfg.m, cfg.world) + cfg.world - 1) / cfg.world * cfg.world;
  s.chunk = s.n_tot / cfg.world;
  s.d_in = Clamp(cfg.n, 16, 256);
  s.hid = Clamp(cfg.n / 2, 32, 512);
  s.d_out = Clamp(cfg.n / 4, 8, 256);
  return s;
}

absl::StatusOr<MlpShape> ShardedShape(const RunConfig& cfg) {
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

MlpDraw DrawMlp(const RunConfig& cfg, const MlpShape& s, int rank, ParamDraw who) {
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

at::Tensor Flatten(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> flat;
  for (const auto& t : ts) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

std::vector<at::Tensor> Unflatten(const at::Tensor& flat,
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

at::Tensor LocalGrad(const at::Tensor& x, const at::Tensor& y,
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

Moments MlpHistory(const RunConfig& cfg, const MlpShape& s, const MlpDraw& d, const AdamHyper& h) {
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

Inputs ZeroInputs(const RunConfig& cfg, const MlpShape& s, int rank, int set) {
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

std::vector<OutputDecl> ZeroOutputs(const RunConfig& cfg, const MlpShape& s) {
  const auto shapes = s.ParamShapes();
  const int64_t part = s.numel() / cfg.world;
  return {{"W1", shapes[0], cfg.dtype},        {"b1", shapes[1], cfg.dtype},
          {"W2", shapes[2], cfg.dtype},        {"b2", shapes[3], cfg.dtype},
          {"exp_avg_part", {part}, cfg.dtype}, {"exp_avg_sq_part", {part}, cfg.dtype}};
}

at::Tensor MeanOfRanks(const std::vector<at::Tensor>& grads) {
  at::Tensor sum = at::zeros_like(grads[0], at::kDouble);
  for (const auto& g : grads) sum += g.to(at::kDouble);
  return sum.to(grads[0].scalar_type()).div_(static_cast<int64_t>(grads.size()));
}

std::vector<std::vector<at::Tensor>> ZeroOracle(const std::vector<Inputs>& all, const MlpShape& s) {
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

Tolerance ParamTolerance(const RunConfig& cfg, double lr, bool flips, int roundings) {
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

double ReductionSlack(const RunConfig& cfg) {
  return 4 * UnitRoundoff(cfg.dtype) * std::max(cfg.world, 2);
}

Tolerance ExpAvgTolerance(const RunConfig& cfg) {
  const double u = UnitRoundoff(cfg.dtype);
  Tolerance t;
  t.atol = 0;
  t.rtol = 8 * u;
  t.atol_mean_abs = ReductionSlack(cfg);
  t.rationale = absl::StrCat(
      "exp_avg (m) after the step: rtol = 8u = ", t.rtol,
      ", atol = 4u max(W, 2) = ", t.atol_mean_abs,
      " times the mean |expected| of the output's nonzero elements (u = unit roundoff of the "
      "dtype). A correct candidate's error is a few ulps of rounding (another op order, fp32 "
      "math rounded once) plus the averaged gradient's: a bf16 reduction in another order "
      "moves it by up to ~W/2 ulps of the partial sums, which is many ulps of an element "
      "whose sum cancels (the scaled atol). PKB's atol = 1e-2 is as large as m itself where "
      "gradients are small (the default shape) and passes noise where m is zero. A sum "
      "instead of a mean, a rank left out or ignored incoming moments move m by far more.");
  return t;
}

Tolerance ExpAvgSqTolerance(const RunConfig& cfg) {
  const double u = UnitRoundoff(cfg.dtype);
  Tolerance t;
  t.atol = 0;
  t.rtol = 12 * u;
  t.atol_mean_abs = 2 * ReductionSlack(cfg);
  t.rationale = absl::StrCat(
      "exp_avg_sq (v) after the step: rtol = 12u = ", t.rtol,
      ", atol = 8u max(W, 2) = ", t.atol_mean_abs,
      " times the mean |expected| of the output's nonzero elements (u = unit roundoff of the "
      "dtype). v = beta2 v_in + (1 - beta2) g^2 is ~1e-3 g^2, so PKB's atol = 1e-2 would pass "
      "zeros, a rank left out or a sum instead of a mean at the default shape. A correct "
      "candidate's error is a few ulps of rounding plus twice the averaged gradient's relative "
      "error (another reduction order or GEMM; the scaled atol where its sum cancels).");
  return t;
}

Tolerance ZeroTolerance(const RunConfig& cfg, int index) {
  if (index < 4) return ParamTolerance(cfg, AdamHyper{}.lr, /*flips=*/true);
  return index == 4 ? ExpAvgTolerance(cfg) : ExpAvgSqTolerance(cfg);
}

}  // namespace pkb::dp
