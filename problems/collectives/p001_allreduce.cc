// Problem 1 — all-reduce SUM of an (M, N) tensor filled with rank + 1.
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

class AllReduce : public Problem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{1,
                               "1_allreduce",
                               1,
                               "generic",
                               "collective",
                               R"md(All-reduce SUM over WORLD.

- Input `x`: (M, N) run dtype. Set 0 (PKB's input): every element = rank + 1. Other sets:
  seeded random integers in [-8, 8), so the sum is exact and depends on the data.
- Output: (M, N) run dtype, the element-wise sum over ranks (W(W+1)/2 for set 0),
  identical on all ranks.
- Exact in bf16 for W <= 22; compared bit for bit.
- Traffic: 2(W-1)/W * M*N*b bytes each way per rank (ring); busbw factor 2(W-1)/W.)md"};
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
    PKB_RETURN_IF_ERROR(comm.AllReduce(out, ReduceOp::kSum));
    return std::vector<at::Tensor>{out};
  }
  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    at::Tensor sum = at::zeros_like(all[0][0], at::kFloat);
    for (const auto& in : all) sum += in[0].to(at::kFloat);
    return std::vector<std::vector<at::Tensor>>(all.size(), {sum.to(cfg.dtype)});
  }
  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    return {0, 0, true, "Sums of small integers are exact in bf16 for W <= 22: bit-exact."};
  }
  Roofline GetRoofline(const RunConfig& cfg) const override {
    double s = cfg.m * cfg.n * ElementBytes(cfg.dtype);
    Roofline r;
    r.nvlink_bytes = AllReduceFactor(cfg.world) * s;
    r.hbm_bytes = 2 * s + r.nvlink_bytes;
    r.flops = cfg.m * cfg.n;
    r.collective_bytes = s;
    r.busbw_factor = AllReduceFactor(cfg.world);
    return r;
  }
};
PKB_REGISTER_PROBLEM(AllReduce);

}  // namespace
}  // namespace pkb
