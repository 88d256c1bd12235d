// Problem 3 — broadcast from rank 0 of an (M, N) tensor filled with rank + 1.
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

class Broadcast : public Problem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        3,
        "3_broadcast",
        1,
        "generic",
        "collective",
        R"md(Broadcast from rank 0 over WORLD (dist.broadcast on a copy of the input, src = 0).

- Input `x`: (M, N) run dtype. Set 0 (PKB's input): every element = rank + 1. Other sets:
  seeded random integers in [-8, 8), different on every rank.
- Output: (M, N) run dtype on every rank: rank 0's `x` (all ones in set 0). The input must
  not be modified.
- Pure data movement: compared bit for bit.
- Traffic: the root sends M*N*b; every other rank receives M*N*b (and forwards about as
  much in a pipelined chain/ring); algbw size S = M*N*b, busbw factor 1.)md"};
    return i;
  }
  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    Inputs in;
    in.Add("x", FilledOrRandomInts(cfg, {cfg.m, cfg.n}, rank + 1, set));
    return in;
  }
  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    return {{"out", {cfg.m, cfg.n}, cfg.dtype}};
  }
  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    at::Tensor out = in[0].clone();
    PKB_RETURN_IF_ERROR(comm.Broadcast(out, /*root=*/0));
    return std::vector<at::Tensor>{out};
  }
  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    std::vector<std::vector<at::Tensor>> res;
    for (size_t r = 0; r < all.size(); ++r) res.push_back({all[0][0].clone()});
    return res;
  }
  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    return {0, 0, true, "Broadcast only moves data: bit-exact."};
  }
  Roofline GetRoofline(const RunConfig& cfg) const override {
    double s = cfg.m * cfg.n * ElementBytes(cfg.dtype);
    Roofline r;
    r.nvlink_bytes = cfg.world > 1 ? s : 0;
    r.hbm_bytes = 2 * s;  // read (root) or write (others) the tensor, plus the copy
    r.flops = 0;
    r.collective_bytes = s;
    r.busbw_factor = 1;
    return r;
  }
};
PKB_REGISTER_PROBLEM(Broadcast);

}  // namespace
}  // namespace pkb
