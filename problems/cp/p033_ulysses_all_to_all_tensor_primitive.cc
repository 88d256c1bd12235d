// Problem 33 — the Ulysses all-to-all primitive: scatter the rows of x over the ranks, gather
// the received blocks side by side along the columns.
#include "absl/strings/str_cat.h"
#include "problems/cp/ulysses.h"
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

constexpr int64_t kScatterDim = 0, kGatherDim = 1;

class UlyssesAllToAllTensor : public Problem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        33,
        "33_ulysses_all_to_all_tensor_primitive",
        1,
        "VeOmni / verl Ulysses sequence parallel: the list all-to-all of one tensor",
        "context parallel",
        R"md(One list all-to-all over WORLD (dist.all_to_all of equal pieces). Requires W | M.

- Inputs per rank r (on the device): `x` (M, N)
  run dtype, randn, different on every rank; int scalars `scatter_dim` = 0 and
  `gather_dim` = 1.
- Computation: cut x into W blocks of M/W consecutive rows; block j goes to rank j.
  Rank r places the block received from rank s in columns [s N, (s+1) N):
  out[i, s N + c] = x_s[r M/W + i, c]. At W = 1 the result is x.
- Output on every rank: `out` (M/W, W N) run dtype (different on every rank).
- Tolerance: bit-exact. Every output element is a copy of one input element, so a
  correct kernel reproduces its bits; a tolerance would only admit rounding through
  a narrower type or a neighbour copied from the wrong place.
- Traffic: (W-1)/W * M N b bytes each way per rank (nccl-tests alltoall, S = M N b).
  FLOPs: 0.)md"};
    return i;
  }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    PKB_RETURN_IF_ERROR(RequirePositiveShape(cfg));
    if (cfg.m % cfg.world != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "33_ulysses_all_to_all_tensor_primitive sends equal blocks of M/W rows (PKB receives "
          "into buffers shaped like the first block, so unequal tensor_split pieces break it): "
          "W = ",
          cfg.world, " must divide M = ", cfg.m));
    }
    return absl::OkStatus();
  }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    Inputs in;
    in.Add("x", at::randn({cfg.m, cfg.n}, Opts(cfg)));
    in.scalars.push_back(ScalarArg::Int("scatter_dim", kScatterDim));
    in.scalars.push_back(ScalarArg::Int("gather_dim", kGatherDim));
    return in;
  }

  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    return {{"out", {cfg.m / cfg.world, cfg.world * cfg.n}, cfg.dtype}};
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    PKB_ASSIGN_OR_RETURN(at::Tensor out,
                         ulysses::ListAllToAll(comm, in[0], kScatterDim, kGatherDim));
    return std::vector<at::Tensor>{out};
  }

  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    std::vector<at::Tensor> xs;
    for (const Inputs& in : all) xs.push_back(in[0]);
    std::vector<std::vector<at::Tensor>> res;
    for (size_t r = 0; r < all.size(); ++r) {
      res.push_back({ulysses::AllToAllOracle(xs, r, kScatterDim, kGatherDim)});
    }
    return res;
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    return {0, 0, true,
            "Every element is a copy of one input element (no arithmetic), so a correct kernel "
            "reproduces its bits: bit-exact."};
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
PKB_REGISTER_PROBLEM(UlyssesAllToAllTensor);

}  // namespace
}  // namespace pkb
