// Problem 40 — a DDP step written by hand: rank 0's parameters and Adam moments broadcast, the
// MLP's gradient all-reduced and averaged, and the same Adam step on every rank.
#include "absl/strings/str_cat.h"
#include "problems/dp/adam.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

constexpr const char* kParamNames[] = {"W1", "b1", "W2", "b2"};

// The flat state rank 0 broadcasts: parameters, then the four m's, then the four v's.
struct FlatState {
  at::Tensor params, m, v;
};

FlatState RankState(const Inputs& in) {
  return {dp::Flatten({in[2], in[3], in[4], in[5]}), dp::Flatten({in[6], in[7], in[8], in[9]}),
          dp::Flatten({in[10], in[11], in[12], in[13]})};
}

// The step from the broadcast state and the averaged flat gradient: W1', b1', W2', b2', the
// four m's, the four v's.
std::vector<at::Tensor> Step(FlatState s, const at::Tensor& mean_grad, const dp::MlpShape& shape,
                             const dp::AdamHyper& h) {
  dp::AdamUpdate(s.params, s.m, s.v, mean_grad, h);
  std::vector<at::Tensor> out;
  for (const at::Tensor& flat : {s.params, s.m, s.v}) {
    for (at::Tensor& t : dp::Unflatten(flat, shape.ParamShapes())) out.push_back(std::move(t));
  }
  return out;
}

class Ddp : public Problem {
 public:
  // N = 256: at N = 64 the biases have 8-32 elements, and a missing Adam step hides
  // in bf16 wherever |p| > 2 lr / 2u ~ 0.13, so too few elements would show it; N = 256 gives
  // d_in 256, hid 128, d_out 64.
  TestShape CpuTestShape() const override { return {64, 256}; }

  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        40,
        "40_ddp",
        1,
        "PyTorch DDP step written by hand: parameter broadcast, gradient all-reduce, Adam",
        "data parallel",
        R"md(One data-parallel training step of a two-layer MLP: rank 0's parameters and Adam
moments are broadcast, every rank computes the MSE gradient on its rows, the gradients
are averaged over WORLD, and every rank applies the same Adam step.

- Any W. Sizes: n_tot = ceil(max(M, W) / W) * W rows, c = n_tot / W per rank;
  d_in = clamp(N, 16, 256), hid = clamp(N / 2, 32, 512), d_out = clamp(N / 4, 8, 256)
  (256, 512, 256 at the default N); P = hid d_in + hid + d_out hid + d_out (262912).
- Inputs (the same on EVERY rank, drawn in this order on the
  device, run dtype): X_full (n_tot, d_in) and y_full (n_tot, d_out) randn; rank r gets
  `X_local`, `y_local` = rows [r c, (r+1) c). Then, on rank 0 only, `W1` (hid, d_in),
  `b1` (hid), `W2` (d_out, hid), `b2` (d_out) randn; other ranks hold zeros. Then the
  moments `exp_avg_W1`, `exp_avg_b1`, `exp_avg_W2`, `exp_avg_b2`, `exp_avg_sq_W1`, ...,
  `exp_avg_sq_b2` with the parameters' shapes: zeros in PKB's set 0. In the other sets
  every rank draws the four parameters (ranks > 0 then zero them, keeping the streams
  aligned), then H = randn(P), each tensor's part times the RMS of that tensor's
  gradient over all n_tot rows, and rank 0 holds m = 0.1 H, v = 0.001 H H split into
  the four shapes (the state after one earlier step); ranks > 0 hold zeros, so the
  moments must come from rank 0 like the parameters.
  Scalars: lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, step = 1 + set mod 7.
- Computation (PKB's, every op in the run dtype; the inputs are not modified):
  1. Broadcast from rank 0 the flattened [W1, b1, W2, b2] (P elements), then the four
     m's, then the four v's (each flattened in the same order).
  2. h = relu(X W1^T + b1); o = h W2^T + b2; loss = mean((o - y)^2) over c d_out;
     gradients by autograd in the dtype (G_o = 2(o - y) / (c d_out), gW2 = G_o^T h,
     gb2 = column sums of G_o, G_h = (G_o W2) * [h > 0], gW1 = G_h^T X, gb1 = column
     sums of G_h).
  3. Flatten the gradients in the same order, all-reduce SUM over WORLD, divide by W.
  4. Adam without weight decay on every element:
)md" + std::string(dp::kAdamFormula) +
            R"md(- Outputs (12, run dtype, identical on all ranks): W1', b1', W2', b2', then the four
  updated m's and the four updated v's, with the parameters' shapes.
)md" + dp::kStepTolerances +
            R"md(- Traffic: three broadcasts of P elements and an all-reduce of P; forward and
  backward ~6 c (d_in hid + hid d_out) FLOPs per rank; Adam ~12 P.)md"};
    return i;
  }

  // PKB draws every rank's inputs from the shared seed 42 + 1000 id + 1000003 set (rank 0's).
  uint64_t Seed(int rank, int set) const override { return Problem::Seed(0, set); }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    return RequirePositiveShape(cfg);
  }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    const dp::MlpShape s = dp::DdpShape(cfg);
    dp::MlpDraw d =
        dp::DrawMlp(cfg, s, rank, set > 0 ? dp::ParamDraw::kAligned : dp::ParamDraw::kPkb);
    dp::AdamHyper h;
    h.step = dp::PkbStep(set);
    std::vector<at::Tensor> m, v;
    if (set > 0) {
      dp::Moments all = dp::MlpHistory(cfg, s, d, h);
      if (rank > 0) {
        all.m.zero_();
        all.v.zero_();
      }
      m = dp::Unflatten(all.m, s.ParamShapes());
      v = dp::Unflatten(all.v, s.ParamShapes());
    } else {
      for (const auto& shape : s.ParamShapes()) {
        m.push_back(at::zeros(shape, Opts(cfg)));
        v.push_back(at::zeros(shape, Opts(cfg)));
      }
    }
    Inputs in;
    in.Add("X_local", d.x);
    in.Add("y_local", d.y);
    for (int k = 0; k < 4; ++k) in.Add(kParamNames[k], d.params[k]);
    for (int k = 0; k < 4; ++k) in.Add(absl::StrCat("exp_avg_", kParamNames[k]), m[k]);
    for (int k = 0; k < 4; ++k) in.Add(absl::StrCat("exp_avg_sq_", kParamNames[k]), v[k]);
    dp::AddHyper(in, h);
    return in;
  }

  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    const auto shapes = dp::DdpShape(cfg).ParamShapes();
    std::vector<OutputDecl> out;
    for (const char* prefix : {"", "exp_avg_", "exp_avg_sq_"}) {
      for (int k = 0; k < 4; ++k) {
        out.push_back({absl::StrCat(prefix, kParamNames[k]), shapes[k], cfg.dtype});
      }
    }
    return out;
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    FlatState s = RankState(in);
    for (at::Tensor* t : {&s.params, &s.m, &s.v}) PKB_RETURN_IF_ERROR(comm.Broadcast(*t, 0));
    at::Tensor grad =
        dp::LocalGrad(in[0], in[1], dp::Unflatten(s.params, dp::DdpShape(cfg).ParamShapes()));
    PKB_RETURN_IF_ERROR(comm.AllReduce(grad, ReduceOp::kSum));
    grad.div_(static_cast<int64_t>(comm.size()));
    return Step(std::move(s), grad, dp::DdpShape(cfg), dp::ReadHyper(in));
  }

  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    const FlatState root = RankState(all[0]);
    const std::vector<at::Tensor> params = {all[0][2], all[0][3], all[0][4], all[0][5]};
    std::vector<at::Tensor> grads;
    for (const auto& in : all) grads.push_back(dp::LocalGrad(in[0], in[1], params));
    FlatState s{root.params.clone(), root.m.clone(), root.v.clone()};
    auto out = Step(std::move(s), dp::MeanOfRanks(grads), dp::DdpShape(cfg), dp::ReadHyper(all[0]));
    return std::vector<std::vector<at::Tensor>>(all.size(), out);
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    if (index < 4) return dp::ParamTolerance(cfg, dp::AdamHyper{}.lr, /*flips=*/true);
    return index < 8 ? dp::ExpAvgTolerance(cfg) : dp::ExpAvgSqTolerance(cfg);
  }

  // From zero moments the step is lr * sign(g): the averaged gradient without one rank mostly
  // keeps its sign, so the parameters cannot show a missing rank; the moments carry that check.
  bool RankMissingDetectable(const RunConfig& cfg, int set, int index) const override {
    return index >= 4;
  }

  Roofline GetRoofline(const RunConfig& cfg) const override {
    const dp::MlpShape s = dp::DdpShape(cfg);
    const double b = ElementBytes(cfg.dtype), p = double(s.numel());
    Roofline r;
    r.nvlink_bytes = 3 * p * b + AllReduceFactor(cfg.world) * p * b;
    // read X, y, the parameters and moments; write the gradient, parameters and moments
    r.hbm_bytes = (s.chunk * (s.d_in + s.d_out) + 3 * p + p + 3 * p) * b;
    r.flops = dp::MlpFlops(s) + 12 * p;
    r.collective_bytes = p * b;
    r.busbw_factor = AllReduceFactor(cfg.world);
    return r;
  }
};
PKB_REGISTER_PROBLEM(Ddp);

}  // namespace
}  // namespace pkb
