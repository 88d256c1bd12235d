// Problem 47 — a full FSDP / ZeRO-3 step: the parameter shards are all-gathered, the MLP's
// gradient is reduce-scattered back into shards and averaged, and AdamW steps each shard.
#include "absl/strings/str_cat.h"
#include "problems/dp/adam.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

constexpr double kWeightDecay = 0.01;

// AdamW on one shard: theta = theta0 - lr * direction (one rounding after the rounded
// quotient), then theta -= (lr * wd) * theta0 (one rounding). Returns theta', m', v'.
std::vector<at::Tensor> StepShard(const at::Tensor& theta0, const Inputs& in,
                                  const at::Tensor& grad) {
  const dp::AdamHyper h = dp::ReadHyper(in);
  at::Tensor m = in[3].clone(), v = in[4].clone();
  at::Tensor theta = theta0.add(dp::AdamDirection(m, v, grad, h), -h.lr);
  theta.add_(theta0, -h.lr * dp::Scalar(in, "weight_decay"));
  return {theta, m, v};
}

class FsdpStep : public Problem {
 public:
  // N = 256: at N = 64 the biases have 8-32 elements, and a missing Adam step hides
  // in bf16 wherever |p| > 2 lr / 2u ~ 0.13, so too few elements would show it; N = 256 gives
  // d_in 256, hid 128, d_out 64.
  TestShape CpuTestShape() const override { return {64, 256}; }

  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        47,
        "47_fsdp_step_e2e",
        1,
        "PyTorch FSDP / ZeRO-3 full step: unshard, forward and backward, reduce-scatter, AdamW",
        "FSDP",
        R"md(One FSDP step of a two-layer MLP: all-gather the flat parameter shards, MSE forward
and backward on this rank's rows, reduce-scatter the flat gradient back into shards
and average it, then AdamW on this rank's shard.

)md" + std::string(dp::kShardedSizes) +
            R"md(- Inputs (the same on EVERY rank, drawn in this order
  on the device, run dtype): X_full (n_tot, d_in) and y_full (n_tot, d_out) randn;
  rank r gets `X_local`, `y_local` = rows [r c, (r+1) c). Then W1 (hid, d_in),
  b1 (hid), W2 (d_out, hid), b2 (d_out) randn on rank 0 only (other ranks hold
  zeros), and `flat_param_shard` = elements [r P/W, (r+1) P/W) of THIS rank's own
  flattened [W1, b1, W2, b2]: in PKB's set 0 only rank 0's shard is nonzero.
  `exp_avg_shard`, `exp_avg_sq_shard` (P/W): zeros in set 0. In the other sets every
  rank keeps the parameters it draws (so every shard is a slice of one real model),
  then draws H = randn(P), each tensor's part times the RMS of that tensor's
  gradient over all n_tot rows, and holds exp_avg_shard = 0.1 H, exp_avg_sq_shard =
  0.001 H H, slice r (the state after one earlier step).
  Scalars: `hid`, `d_in`, `d_out` (PKB's param_shapes = ((hid, d_in), (hid,),
  (d_out, hid), (d_out,))), lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8,
  weight_decay = 0.01, step = 1 + set mod 7.
- Computation (PKB's, every op in the run dtype; the inputs are not modified):
  1. all_gather_into_tensor of the shards, unflattened into W1, b1, W2, b2.
  2. The MLP's MSE forward and backward on this rank's rows, as in problem 40
     (autograd in the dtype); flatten the gradients in the same order.
  3. reduce_scatter_tensor SUM over WORLD into this rank's slice, divide by W.
  4. m = m * beta1 + (1 - beta1) g; v = v * beta2 + (1 - beta2) g g;
     m_hat = m / (1 - beta1^step); v_hat = v / (1 - beta2^step);
     theta = theta0 + (-lr) * (m_hat / (sqrt(v_hat) + eps)) (the quotient rounded,
     then one rounding of the axpy); theta = theta + (-lr * weight_decay) * theta0
     (one rounding), theta0 the input shard.
- Outputs (3, run dtype, this rank's): theta' (`flat_param_shard`), m'
  (`exp_avg_shard`), v' (`exp_avg_sq_shard`), each (P/W).
- In PKB's set 0 at W > 1, W2 = b1 = b2 = 0, so only gW2's columns of hidden units
  with nonzero W1 rows and gb2 are nonzero: most shards keep m = v = 0 and
  theta' = theta, and weight decay (1e-5 theta) vanishes in bf16. The other sets
  exercise the whole step.
)md" + dp::kStepTolerances +
            R"md(  theta' has rtol 3u (two roundings of the update).
- Traffic: all-gather P and reduce-scatter P elements; forward and backward
  ~6 c (d_in hid + hid d_out) FLOPs per rank; AdamW ~14 P/W.)md"};
    return i;
  }

  // PKB draws every rank's inputs from the shared seed 42 + 1000 id + 1000003 set (rank 0's).
  uint64_t Seed(int rank, int set) const override { return Problem::Seed(0, set); }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    PKB_RETURN_IF_ERROR(RequirePositiveShape(cfg));
    return dp::ShardedShape(cfg).status();
  }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    const dp::MlpShape s = *dp::ShardedShape(cfg);
    dp::MlpDraw d =
        dp::DrawMlp(cfg, s, rank, set > 0 ? dp::ParamDraw::kShared : dp::ParamDraw::kPkb);
    const int64_t part = s.numel() / cfg.world;
    dp::AdamHyper h;
    h.step = dp::PkbStep(set);
    dp::Moments mv{at::zeros({part}, Opts(cfg)), at::zeros({part}, Opts(cfg))};
    if (set > 0) {
      dp::Moments all = dp::MlpHistory(cfg, s, d, h);
      mv = {all.m.narrow(0, rank * part, part).contiguous(),
            all.v.narrow(0, rank * part, part).contiguous()};
    }
    Inputs in;
    in.Add("X_local", d.x);
    in.Add("y_local", d.y);
    in.Add("flat_param_shard", dp::Flatten(d.params).narrow(0, rank * part, part).contiguous());
    in.Add("exp_avg_shard", mv.m);
    in.Add("exp_avg_sq_shard", mv.v);
    in.scalars.push_back(ScalarArg::Int("hid", s.hid));
    in.scalars.push_back(ScalarArg::Int("d_in", s.d_in));
    in.scalars.push_back(ScalarArg::Int("d_out", s.d_out));
    dp::AddHyper(in, h, kWeightDecay);
    return in;
  }

  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    const int64_t part = dp::ShardedShape(cfg)->numel() / cfg.world;
    return {{"flat_param_shard", {part}, cfg.dtype},
            {"exp_avg_shard", {part}, cfg.dtype},
            {"exp_avg_sq_shard", {part}, cfg.dtype}};
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    const dp::MlpShape s = *dp::ShardedShape(cfg);
    at::Tensor full = at::empty({s.numel()}, in[2].options());
    PKB_RETURN_IF_ERROR(comm.AllGatherInto(full, in[2]));
    at::Tensor grad = dp::LocalGrad(in[0], in[1], dp::Unflatten(full, s.ParamShapes()));
    at::Tensor slice = at::empty({in[2].numel()}, grad.options());
    PKB_RETURN_IF_ERROR(comm.ReduceScatterInto(slice, grad, ReduceOp::kSum));
    slice.div_(static_cast<int64_t>(comm.size()));
    return StepShard(in[2], in, slice);
  }

  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    const dp::MlpShape s = *dp::ShardedShape(cfg);
    std::vector<at::Tensor> shards;
    for (const auto& in : all) shards.push_back(in[2]);
    const auto params = dp::Unflatten(at::cat(shards), s.ParamShapes());
    std::vector<at::Tensor> grads;
    for (const auto& in : all) grads.push_back(dp::LocalGrad(in[0], in[1], params));
    const at::Tensor mean = dp::MeanOfRanks(grads);
    const int64_t part = s.numel() / static_cast<int64_t>(all.size());
    std::vector<std::vector<at::Tensor>> out;
    for (size_t r = 0; r < all.size(); ++r) {
      out.push_back(StepShard(all[r][2], all[r], mean.narrow(0, r * part, part)));
    }
    return out;
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    if (index == 0) return dp::ParamTolerance(cfg, dp::AdamHyper{}.lr, /*flips=*/true, 3);
    return index == 1 ? dp::ExpAvgTolerance(cfg) : dp::ExpAvgSqTolerance(cfg);
  }

  // From zero moments the step is lr * sign(g): the averaged gradient without one rank mostly
  // keeps its sign, so the parameter shard cannot show a missing rank; the moments carry it.
  bool RankMissingDetectable(const RunConfig& cfg, int set, int index) const override {
    return index >= 1;
  }

  Roofline GetRoofline(const RunConfig& cfg) const override {
    const dp::MlpShape s = *dp::ShardedShape(cfg);
    const double b = ElementBytes(cfg.dtype), p = double(s.numel()), part = p / cfg.world;
    Roofline r;
    r.nvlink_bytes = 2 * AllGatherFactor(cfg.world) * p * b;
    // read X, y, the gathered parameters and the shard's state; write the gathered parameters,
    // the gradient and the shard's state
    r.hbm_bytes = (s.chunk * (s.d_in + s.d_out) + 2 * p + p + 6 * part) * b;
    r.flops = dp::MlpFlops(s) + 14 * part;
    r.collective_bytes = p * b;
    r.busbw_factor = AllGatherFactor(cfg.world);
    return r;
  }
};
PKB_REGISTER_PROBLEM(FsdpStep);

}  // namespace
}  // namespace pkb
