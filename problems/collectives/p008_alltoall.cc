// Problem 8 — all-to-all with equal splits of a (W, M, N) tensor whose slice d is 10 * rank + d.
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

class AllToAll : public Problem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        8,
        "8_alltoall",
        1,
        "generic",
        "collective",
        R"md(All-to-all with equal splits along dim 0 over WORLD (dist.all_to_all_single).

- Input `x`: (W, M, N) run dtype. Set 0 (PKB's input): slice d filled with 10*rank + d.
  Other sets: seeded random integers in [-8, 8), different on every rank.
- Output: (W, M, N) run dtype on rank r: slice s = slice r of rank s's `x` (all 10*s + r in
  set 0).
- Pure data movement: compared bit for bit.
- Traffic: (W-1) * M*N*b bytes each way per rank; algbw size S = W*M*N*b (one rank's
  tensor), busbw factor (W-1)/W.)md"};
    return i;
  }
  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    at::Tensor x;
    if (set == 0) {
      x = at::empty({cfg.world, cfg.m, cfg.n}, Opts(cfg));
      for (int d = 0; d < cfg.world; ++d) x[d].fill_(10 * rank + d);
    } else {
      x = at::randint(-8, 8, {cfg.world, cfg.m, cfg.n}, Opts(cfg));
    }
    Inputs in;
    in.Add("x", x);
    return in;
  }
  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    return {{"out", {cfg.world, cfg.m, cfg.n}, cfg.dtype}};
  }
  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    at::Tensor x = in[0].contiguous();
    at::Tensor out = at::empty_like(x);
    PKB_RETURN_IF_ERROR(comm.AllToAllSingle(out, x, {}, {}));
    return std::vector<at::Tensor>{out};
  }
  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    std::vector<std::vector<at::Tensor>> res;
    for (size_t r = 0; r < all.size(); ++r) {
      std::vector<at::Tensor> parts;
      for (const auto& in : all) parts.push_back(in[0][r]);
      res.push_back({at::stack(parts)});
    }
    return res;
  }
  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    return {0, 0, true, "All-to-all only moves data: bit-exact."};
  }
  Roofline GetRoofline(const RunConfig& cfg) const override {
    double s = cfg.m * cfg.n * ElementBytes(cfg.dtype);
    Roofline r;
    r.nvlink_bytes = (cfg.world - 1) * s;
    r.hbm_bytes = 2 * cfg.world * s;  // read x, write out
    r.flops = 0;
    r.collective_bytes = cfg.world * s;
    r.busbw_factor = AllGatherFactor(cfg.world);
    return r;
  }
};
PKB_REGISTER_PROBLEM(AllToAll);

}  // namespace
}  // namespace pkb
