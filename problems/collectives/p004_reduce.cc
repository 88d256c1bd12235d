// Problem 4 — reduce SUM onto rank 0 of an (M, N) tensor filled with rank + 1.
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

class Reduce : public Problem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        4,
        "4_reduce",
        1,
        "generic",
        "collective",
        R"md(Reduce SUM onto rank `dst` = 0 over WORLD (dist.reduce on a copy of the input).

- Input `x`: (M, N) run dtype. Set 0 (PKB's input): every element = rank + 1. Other sets:
  seeded random integers in [-8, 8), so the sum is exact and depends on the data.
- Non-tensor argument `dst` = 0 (passed explicitly).
- Output: (M, N) run dtype. Rank 0: the element-wise sum over ranks (W(W+1)/2 in set 0).
  Other ranks: their own copy of `x`, unchanged (NCCL does not write the buffer on non-root
  ranks, and every rank's output is compared). The input must not be modified.
- Exact in bf16 for W <= 22; compared bit for bit.
- Traffic: about M*N*b sent per rank (chain/ring), M*N*b received by the root; algbw size
  S = M*N*b, busbw factor 1.)md"};
    return i;
  }
  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    Inputs in;
    in.Add("x", FilledOrRandomInts(cfg, {cfg.m, cfg.n}, rank + 1, set));
    in.scalars.push_back(ScalarArg::Int("dst", 0));
    return in;
  }
  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    return {{"out", {cfg.m, cfg.n}, cfg.dtype}};
  }
  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    at::Tensor out = in[0].clone();
    PKB_RETURN_IF_ERROR(comm.Reduce(out, static_cast<int>(in.scalars[0].i), ReduceOp::kSum));
    return std::vector<at::Tensor>{out};
  }
  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    int dst = static_cast<int>(all[0].scalars[0].i);
    at::Tensor sum = at::zeros_like(all[0][0], at::kFloat);
    for (const auto& in : all) sum += in[0].to(at::kFloat);
    std::vector<std::vector<at::Tensor>> res;
    for (size_t r = 0; r < all.size(); ++r) {
      res.push_back({static_cast<int>(r) == dst ? sum.to(cfg.dtype) : all[r][0].clone()});
    }
    return res;
  }
  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    return {0, 0, true,
            "Sums of small integers are exact in bf16 for W <= 22, and non-root ranks return their "
            "input unchanged: bit-exact."};
  }
  Roofline GetRoofline(const RunConfig& cfg) const override {
    double s = cfg.m * cfg.n * ElementBytes(cfg.dtype);
    Roofline r;
    r.nvlink_bytes = cfg.world > 1 ? s : 0;
    r.hbm_bytes = 2 * s + r.nvlink_bytes;  // read x, write the copy, read what arrives
    r.flops = cfg.m * cfg.n;
    r.collective_bytes = s;
    r.busbw_factor = 1;
    return r;
  }
};
PKB_REGISTER_PROBLEM(Reduce);

}  // namespace
}  // namespace pkb
