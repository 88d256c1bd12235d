// Problem 2 — all-gather of an (M, N) tensor filled with rank + 1 into a (W, M, N) tensor.
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

class AllGather : public Problem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        2,
        "2_allgather",
        1,
        "generic",
        "collective",
        R"md(All-gather over WORLD into a new tensor (dist.all_gather_into_tensor).

- Input `x`: (M, N) run dtype. Set 0 (PKB's input): every element = rank + 1. Other sets:
  seeded random integers in [-8, 8), different on every rank.
- Output: (W, M, N) run dtype; slice s is rank s's `x` (all s + 1 in set 0); identical on
  all ranks.
- Pure data movement: compared bit for bit.
- Traffic: (W-1) * M*N*b bytes each way per rank (ring or direct); algbw size S = W*M*N*b
  (the gathered tensor), busbw factor (W-1)/W.)md"};
    return i;
  }
  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    Inputs in;
    in.Add("x", FilledOrRandomInts(cfg, {cfg.m, cfg.n}, rank + 1, set));
    return in;
  }
  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    return {{"out", {cfg.world, cfg.m, cfg.n}, cfg.dtype}};
  }
  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    at::Tensor x = in[0].contiguous();
    at::Tensor out = at::empty({comm.size(), cfg.m, cfg.n}, x.options());
    PKB_RETURN_IF_ERROR(comm.AllGatherInto(out, x));
    return std::vector<at::Tensor>{out};
  }
  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    std::vector<at::Tensor> xs;
    for (const auto& in : all) xs.push_back(in[0]);
    at::Tensor out = at::stack(xs);
    std::vector<std::vector<at::Tensor>> res;
    for (size_t r = 0; r < all.size(); ++r) res.push_back({out.clone()});
    return res;
  }
  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    return {0, 0, true, "All-gather only moves data: bit-exact."};
  }
  Roofline GetRoofline(const RunConfig& cfg) const override {
    double s = cfg.m * cfg.n * ElementBytes(cfg.dtype);
    Roofline r;
    r.nvlink_bytes = (cfg.world - 1) * s;
    r.hbm_bytes = s + cfg.world * s;  // read x, write every slot
    r.flops = 0;
    r.collective_bytes = cfg.world * s;
    r.busbw_factor = AllGatherFactor(cfg.world);
    return r;
  }
};
PKB_REGISTER_PROBLEM(AllGather);

}  // namespace
}  // namespace pkb
