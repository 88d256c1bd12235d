// Problem 6 — gather onto rank 0 of an (M, N) tensor filled with rank + 1, stacked to (W, M, N).
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

class Gather : public Problem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        6,
        "6_gather",
        1,
        "generic",
        "collective",
        R"md(Gather onto rank 0 over WORLD (dist.gather, dst = 0), then stack.

- Input `x`: (M, N) run dtype. Set 0 (PKB's input): every element = rank + 1. Other sets:
  seeded random integers in [-8, 8), different on every rank.
- Output, rank-dependent shape. Rank 0: (W, M, N) run dtype, slice s = rank s's `x` (all
  s + 1 in set 0). Other ranks: (M, N), their own `x` unchanged (PKB returns the input
  tensor itself there). The input must not be modified.
- Pure data movement: compared bit for bit.
- Traffic: every other rank sends M*N*b, the root receives (W-1)*M*N*b; algbw size
  S = W*M*N*b (the gathered tensor), busbw factor (W-1)/W.)md"};
    return i;
  }
  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    Inputs in;
    in.Add("x", FilledOrRandomInts(cfg, {cfg.m, cfg.n}, rank + 1, set));
    return in;
  }
  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    if (rank == 0) return {{"out", {cfg.world, cfg.m, cfg.n}, cfg.dtype}};
    return {{"out", {cfg.m, cfg.n}, cfg.dtype}};
  }
  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    at::Tensor x = in[0].contiguous();
    std::vector<at::Tensor> parts;
    PKB_RETURN_IF_ERROR(comm.Gather(parts, x, /*root=*/0));
    if (comm.rank() == 0) return std::vector<at::Tensor>{at::stack(parts)};
    return std::vector<at::Tensor>{in[0].clone()};
  }
  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    std::vector<at::Tensor> xs;
    for (const auto& in : all) xs.push_back(in[0]);
    std::vector<std::vector<at::Tensor>> res;
    res.push_back({at::stack(xs)});
    for (size_t r = 1; r < all.size(); ++r) res.push_back({all[r][0].clone()});
    return res;
  }
  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    return {0, 0, true, "Gather only moves data: bit-exact."};
  }
  Roofline GetRoofline(const RunConfig& cfg) const override {
    double s = cfg.m * cfg.n * ElementBytes(cfg.dtype);
    Roofline r;
    r.nvlink_bytes = (cfg.world - 1) * s;  // the root's receives bound the time
    r.hbm_bytes = (cfg.world + 1) * s;     // root: read x, write every slot
    r.flops = 0;
    r.collective_bytes = cfg.world * s;
    r.busbw_factor = AllGatherFactor(cfg.world);
    return r;
  }
};
PKB_REGISTER_PROBLEM(Gather);

}  // namespace
}  // namespace pkb
