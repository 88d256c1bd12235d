// Problem 43 — the end of a ZeRO-3 / FSDP step: Adam on this rank's shard of the master weights
// with its shard of the (already averaged) gradient, then an all-gather that unshards them.
#include "absl/strings/str_cat.h"
#include "problems/dp/adam.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

int64_t ShardSize(const RunConfig& cfg) { return dp::Clamp(64 * cfg.m, 64, 4096); }

// Rank r's updated master shard, from copies of its inputs.
at::Tensor UpdatedShard(const Inputs& in) {
  at::Tensor w = in[1].clone(), m = in[2].clone(), v = in[3].clone();
  dp::AdamUpdate(w, m, v, in[0], dp::ReadHyper(in));
  return w;
}

class FusedAdamUnshard : public Problem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        43,
        "43_fused_adam_grad_unshard_allgather",
        1,
        "ZeRO-3 / FSDP-style sharded optimizer step followed by a parameter unshard",
        "ZeRO / FSDP",
        R"md(Adam on this rank's shard of the master weights, then all_gather_into_tensor of the
updated shards.

- Any W. Shard size P = clamp(64 M, 64, 4096) (4096 at the default M).
- Inputs (the same on EVERY rank, drawn in this order on
  the device, run dtype): full_grad (P W) randn, then full_master (P W) randn; rank r
  gets `grad_shard` and `master_shard` = elements [r P, (r+1) P) of each.
  `exp_avg`, `exp_avg_sq` (P): zeros in PKB's set 0; in the other sets every rank then
  draws H = randn(P W) and holds exp_avg = 0.1 H, exp_avg_sq = 0.001 H H, slice r (the
  state after one earlier step). Scalars: lr = 1e-3, beta1 = 0.9, beta2 = 0.999,
  eps = 1e-8, step = 1 + set mod 7.
- Computation (PKB's, every op in the run dtype, on copies of the inputs):
)md" + std::string(dp::kAdamFormula) +
            R"md(  with p the master shard and g the gradient shard; then all_gather_into_tensor of
  the updated shards.
- Output: (W P,) run dtype, identical on all ranks.
- Tolerance (u = 2^-8 in bf16): |d| <= 16 u lr + 2u |expected|. PKB's atol = 1e-2
  passes the gathered master weights without any update (the step is ~lr = 1e-3);
  here the step itself is checked: the bound admits Adam computed in fp32 and
  rounded once (PKB rounds each of ~8 ops, <= ~8u of the step) and the output's
  rounding either way, and rejects a missing update, a wrong step count or bias
  correction, and ignored incoming moments (sets > 0).
- Traffic: all-gather of (W - 1) P elements sent per rank; ~12 P FLOPs.)md"};
    return i;
  }

  // PKB draws every rank's inputs from the shared seed 42 + 1000 id + 1000003 set (rank 0's).
  uint64_t Seed(int rank, int set) const override { return Problem::Seed(0, set); }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    return RequirePositiveShape(cfg);
  }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    const int64_t p = ShardSize(cfg), total = p * cfg.world;
    at::Tensor full_grad = at::randn({total}, Opts(cfg));
    at::Tensor full_master = at::randn({total}, Opts(cfg));
    dp::AdamHyper h;
    h.step = dp::PkbStep(set);
    dp::Moments mv{at::zeros({p}, Opts(cfg)), at::zeros({p}, Opts(cfg))};
    if (set > 0) {
      dp::Moments all = dp::DrawHistory(cfg, {total}, 1.0, h);
      mv = {all.m.narrow(0, rank * p, p).contiguous(), all.v.narrow(0, rank * p, p).contiguous()};
    }
    Inputs in;
    in.Add("grad_shard", full_grad.narrow(0, rank * p, p).contiguous());
    in.Add("master_shard", full_master.narrow(0, rank * p, p).contiguous());
    in.Add("exp_avg", mv.m);
    in.Add("exp_avg_sq", mv.v);
    dp::AddHyper(in, h);
    return in;
  }

  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    return {{"master", {ShardSize(cfg) * cfg.world}, cfg.dtype}};
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    at::Tensor w = UpdatedShard(in);
    at::Tensor gathered = at::empty({w.numel() * comm.size()}, w.options());
    PKB_RETURN_IF_ERROR(comm.AllGatherInto(gathered, w));
    return std::vector<at::Tensor>{gathered};
  }

  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    std::vector<at::Tensor> shards;
    for (const auto& in : all) shards.push_back(UpdatedShard(in));
    return std::vector<std::vector<at::Tensor>>(all.size(), {at::cat(shards)});
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    // The gradient is an input: no reduction order can flip a step's sign.
    return dp::ParamTolerance(cfg, dp::AdamHyper{}.lr, /*flips=*/false);
  }

  Roofline GetRoofline(const RunConfig& cfg) const override {
    const double b = ElementBytes(cfg.dtype), p = double(ShardSize(cfg));
    Roofline r;
    r.nvlink_bytes = (cfg.world - 1) * p * b;
    r.hbm_bytes = 6 * p * b + cfg.world * p * b;  // read g, w, m, v; write w (m, v stay local)
    r.flops = 12 * p;
    r.collective_bytes = cfg.world * p * b;
    r.busbw_factor = AllGatherFactor(cfg.world);
    return r;
  }
};
PKB_REGISTER_PROBLEM(FusedAdamUnshard);

}  // namespace
}  // namespace pkb
