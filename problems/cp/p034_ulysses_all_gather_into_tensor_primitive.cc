// Problem 34 — the Ulysses all-gather primitive: dist.all_gather_into_tensor along dim 0.
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

class UlyssesAllGatherIntoTensor : public Problem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        34,
        "34_ulysses_all_gather_into_tensor_primitive",
        1,
        "VeOmni / verl Ulysses sequence parallel: all_gather_into_tensor",
        "context parallel",
        R"md(All-gather over WORLD along dim 0 (dist.all_gather_into_tensor). Any W.

- Inputs per rank r (on the device): `x` (M, N)
  run dtype, randn, different on every rank.
- Computation: out rows [s M, (s+1) M) = rank s's x. At W = 1 the result is x.
- Output on every rank: `out` (W M, N) run dtype, identical on all ranks.
- Tolerance: bit-exact. Every output element is a copy of one input element, so a
  correct kernel reproduces its bits.
- Traffic: (W-1) M N b bytes received per rank (ring or direct); nccl-tests allgather
  with S = W M N b, busbw factor (W-1)/W. FLOPs: 0.)md"};
    return i;
  }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    return RequirePositiveShape(cfg);
  }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    Inputs in;
    in.Add("x", at::randn({cfg.m, cfg.n}, Opts(cfg)));
    return in;
  }

  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    return {{"out", {cfg.world * cfg.m, cfg.n}, cfg.dtype}};
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    at::Tensor x = in[0].contiguous();
    if (comm.size() == 1) return std::vector<at::Tensor>{x.clone()};
    at::Tensor out = at::empty({comm.size() * x.size(0), x.size(1)}, x.options());
    PKB_RETURN_IF_ERROR(comm.AllGatherInto(out, x));
    return std::vector<at::Tensor>{out};
  }

  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    std::vector<at::Tensor> xs;
    for (const Inputs& in : all) xs.push_back(in[0]);
    at::Tensor out = at::cat(xs, 0);
    return std::vector<std::vector<at::Tensor>>(all.size(), {out});
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    return {0, 0, true,
            "Every element is a copy of one input element (no arithmetic), so a correct kernel "
            "reproduces its bits: bit-exact."};
  }

  Roofline GetRoofline(const RunConfig& cfg) const override {
    const double s = cfg.m * cfg.n * ElementBytes(cfg.dtype);
    Roofline r;
    r.nvlink_bytes = (cfg.world - 1) * s;
    r.hbm_bytes = s + cfg.world * s;  // read x, write every block
    r.flops = 0;
    r.collective_bytes = cfg.world * s;
    r.busbw_factor = AllGatherFactor(cfg.world);
    return r;
  }
};
PKB_REGISTER_PROBLEM(UlyssesAllGatherIntoTensor);

}  // namespace
}  // namespace pkb
