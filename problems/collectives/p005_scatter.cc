// Problem 5 — scatter from rank 0 of a (W, M, N) tensor whose slice i is filled with i + 1.
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

class Scatter : public Problem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{5,
                               "5_scatter",
                               1,
                               "generic",
                               "collective",
                               R"md(Scatter from rank 0 over WORLD (dist.scatter, src = 0).

- Input `x`, rank-dependent shape. Rank 0: (W, M, N) run dtype; set 0 (PKB's input): slice
  i filled with i + 1; other sets: seeded random integers in [-8, 8). Other ranks: (M, N)
  run dtype; zeros in set 0, seeded random integers in [-8, 8) in other sets (their values
  never reach the output).
- Output: (M, N) run dtype on every rank r: slice r of rank 0's `x` (all r + 1 in set 0).
  PKB's reference receives into a fresh buffer on rank 0 and into a copy of `x` elsewhere;
  either way the whole buffer is overwritten. The input must not be modified.
- Pure data movement: compared bit for bit.
- Traffic: the root sends (W-1)*M*N*b, every other rank receives M*N*b; algbw size
  S = W*M*N*b (the root's tensor), busbw factor (W-1)/W.)md"};
    return i;
  }
  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    Inputs in;
    if (rank == 0) {
      at::Tensor x;
      if (set == 0) {
        x = at::empty({cfg.world, cfg.m, cfg.n}, Opts(cfg));
        for (int i = 0; i < cfg.world; ++i) x[i].fill_(i + 1);
      } else {
        x = at::randint(-8, 8, {cfg.world, cfg.m, cfg.n}, Opts(cfg));
      }
      in.Add("x", x);
    } else {
      in.Add("x", FilledOrRandomInts(cfg, {cfg.m, cfg.n}, 0, set));
    }
    return in;
  }
  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    return {{"out", {cfg.m, cfg.n}, cfg.dtype}};
  }
  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    at::Tensor out;
    std::vector<at::Tensor> pieces;
    if (comm.rank() == 0) {
      out = at::empty({cfg.m, cfg.n}, in[0].options());
      for (int i = 0; i < comm.size(); ++i) pieces.push_back(in[0][i].contiguous());
    } else {
      out = in[0].clone();
    }
    PKB_RETURN_IF_ERROR(comm.Scatter(out, pieces, /*root=*/0));
    return std::vector<at::Tensor>{out};
  }
  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    std::vector<std::vector<at::Tensor>> res;
    for (size_t r = 0; r < all.size(); ++r) res.push_back({all[0][0][r].clone()});
    return res;
  }
  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    return {0, 0, true, "Scatter only moves data: bit-exact."};
  }
  Roofline GetRoofline(const RunConfig& cfg) const override {
    double s = cfg.m * cfg.n * ElementBytes(cfg.dtype);
    Roofline r;
    r.nvlink_bytes = (cfg.world - 1) * s;  // the root's sends bound the time
    r.hbm_bytes = (cfg.world + 1) * s;     // root: read every slice, write its own piece
    r.flops = 0;
    r.collective_bytes = cfg.world * s;
    r.busbw_factor = AllGatherFactor(cfg.world);
    return r;
  }
};
PKB_REGISTER_PROBLEM(Scatter);

}  // namespace
}  // namespace pkb
