// Problem 27 — the token all-to-all of an MoE dispatch with explicit split lists (here the
// balanced lists PKB passes): rank r sends its row block s to rank s.
#include <vector>

#include "absl/strings/str_cat.h"
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

// PKB's split list: W entries of floor(M / W), the remainder added to the last.
std::vector<int64_t> BalancedSplits(int64_t rows, int64_t world) {
  std::vector<int64_t> splits(world, rows / world);
  splits.back() += rows % world;
  return splits;
}

class MoeAll2AllPrimitive : public Problem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        27,
        "27_moe_all2all_primitive",
        1,
        "generic (the token all-to-all of an MoE dispatch with explicit split lists)",
        "expert parallel",
        R"md(The token all-to-all of an MoE dispatch (dist.all_to_all_single with split lists) over
WORLD. Requires W | M: PKB's split lists are mutually inconsistent otherwise.

- Inputs per rank r (on the device): `local_tensor`
  x (M, N) run dtype, randn, different per rank. PKB's Python lists arrive as int
  scalars: `input_split_sizes[s]` and `output_split_sizes[s]` for s = 0..W-1, all M/W
  (PKB gives floor(M/W) with the remainder added to the last; W | M makes them equal).
- Computation: rank r sends rows [s B, (s+1) B) of x (B = M/W) to rank s and stacks
  the blocks it receives in source-rank order. With W = 1 the reference returns x.
- Output: `out` (M, N) run dtype; rows [s B, (s+1) B) = rank s's rows [r B, (r+1) B).
  Pure copies: compared bit for bit.
- Traffic: (W-1)/W * M N b bytes each way per rank (nccl-tests alltoall: busbw = algbw
  * (W-1)/W with S = M N b). FLOPs: 0.)md"};
    return i;
  }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    PKB_RETURN_IF_ERROR(RequirePositiveShape(cfg));
    if (cfg.m % cfg.world != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the split lists give every peer floor(M/W) rows and the last one the remainder, so "
          "for M mod W != 0 rank W-1 would receive more rows than it declares: W = ",
          cfg.world, " must divide M = ", cfg.m));
    }
    return absl::OkStatus();
  }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    Inputs in;
    in.Add("local_tensor", at::randn({cfg.m, cfg.n}, Opts(cfg)));
    std::vector<int64_t> splits = BalancedSplits(cfg.m, cfg.world);
    AddIntList(in, "input_split_sizes", splits);
    AddIntList(in, "output_split_sizes", splits);
    return in;
  }

  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    return {{"out", {cfg.m, cfg.n}, cfg.dtype}};
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    const int w = comm.size();
    at::Tensor x = in[0].contiguous();
    if (w == 1) return std::vector<at::Tensor>{x};  // as PKB: no exchange, no copy
    PKB_ASSIGN_OR_RETURN(std::vector<int64_t> in_splits, IntList(in, "input_split_sizes"));
    PKB_ASSIGN_OR_RETURN(std::vector<int64_t> out_splits, IntList(in, "output_split_sizes"));
    int64_t rows = 0;
    for (int64_t n : out_splits) rows += n;
    at::Tensor out = at::empty({rows, x.size(1)}, x.options());
    PKB_RETURN_IF_ERROR(comm.AllToAllSingle(out, x, out_splits, in_splits));
    return std::vector<at::Tensor>{out};
  }

  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    const int64_t w = static_cast<int64_t>(all.size()), block = cfg.m / w;
    std::vector<std::vector<at::Tensor>> res;
    for (int64_t r = 0; r < w; ++r) {
      std::vector<at::Tensor> blocks;
      for (int64_t s = 0; s < w; ++s) blocks.push_back(all[s][0].narrow(0, r * block, block));
      res.push_back({at::cat(blocks, 0)});
    }
    return res;
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    return {0, 0, true, "Rows are moved, never computed: bit-exact."};
  }

  Roofline GetRoofline(const RunConfig& cfg) const override {
    const double s = cfg.m * cfg.n * ElementBytes(cfg.dtype);
    const double f = static_cast<double>(cfg.world - 1) / cfg.world;
    Roofline r;
    r.nvlink_bytes = f * s;
    r.hbm_bytes = 2 * s;  // read x, write out
    r.flops = 0;
    r.collective_bytes = s;
    r.busbw_factor = f;
    return r;
  }
};
PKB_REGISTER_PROBLEM(MoeAll2AllPrimitive);

}  // namespace
}  // namespace pkb
