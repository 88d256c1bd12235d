// Problem 36 — Ulysses gather_seq_scatter_heads: the all-to-all before attention that trades
// each rank's sequence shard of all heads for the full sequence of its own head group.
#include "problems/cp/ulysses.h"
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

constexpr int64_t kSeqDim = 1, kHeadDim = 2;

class UlyssesGatherSeqScatterHeads : public Problem {
 public:
  // 128 x 256: at 64 x 64 PKB's B = M/64 and T = N/64 would be 1.
  TestShape CpuTestShape() const override { return {128, 256}; }

  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        36,
        "36_ulysses_gather_seq_scatter_heads",
        1,
        "VeOmni / verl Ulysses sequence parallel: gather_seq_scatter_heads",
        "context parallel",
        R"md(The Ulysses all-to-all before attention, over WORLD: scatter heads, gather sequence.
Sizes: B = max(1, M/64), T = max(1, N/64) (the local sequence), H = 8, D = 64 (B = T =
16 at M = N = 1024). Requires W | 8 (PKB's builder asserts it).

- Inputs per rank r (on the device): `x` (B, T, H,
  D) run dtype, randn, different on every rank; int scalars `seq_dim` = 1, `head_dim` =
  2, `unpadded_dim_size` = 0 (no unpadding).
- Computation: one list all-to-all. Rank r sends heads [j H/W, (j+1) H/W) (consecutive
  heads) of every position to rank j and concatenates what it receives along the
  sequence in source-rank order:
  out[b, s T + t, h, d] = x_s[b, t, r H/W + h, d]. At W = 1 the result is x.
- Output on every rank: `out` (B, W T, H/W, D) run dtype (different on every rank).
- Tolerance: bit-exact. Every output element is a copy of one input element, so a
  correct kernel reproduces its bits.
- Traffic: (W-1)/W * B T H D b bytes each way per rank (224 KiB at W = 8). FLOPs: 0.)md"};
    return i;
  }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    PKB_RETURN_IF_ERROR(RequirePositiveShape(cfg));
    return ulysses::RequireWorldDividesHeads(cfg, "36_ulysses_gather_seq_scatter_heads");
  }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    const ulysses::Dims d = ulysses::AttnDims(cfg);
    Inputs in;
    in.Add("x", at::randn({d.b, d.t, d.h, d.d}, Opts(cfg)));
    in.scalars.push_back(ScalarArg::Int("seq_dim", kSeqDim));
    in.scalars.push_back(ScalarArg::Int("head_dim", kHeadDim));
    in.scalars.push_back(ScalarArg::Int("unpadded_dim_size", 0));
    return in;
  }

  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    const ulysses::Dims d = ulysses::AttnDims(cfg);
    return {{"out", {d.b, cfg.world * d.t, d.h / cfg.world, d.d}, cfg.dtype}};
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    PKB_ASSIGN_OR_RETURN(at::Tensor out, ulysses::ListAllToAll(comm, in[0], kHeadDim, kSeqDim));
    return std::vector<at::Tensor>{out};
  }

  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    std::vector<at::Tensor> xs;
    for (const Inputs& in : all) xs.push_back(in[0]);
    std::vector<std::vector<at::Tensor>> res;
    for (size_t r = 0; r < all.size(); ++r) {
      res.push_back({ulysses::AllToAllOracle(xs, r, kHeadDim, kSeqDim)});
    }
    return res;
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    return {0, 0, true,
            "Every element is a copy of one input element (no arithmetic), so a correct kernel "
            "reproduces its bits: bit-exact."};
  }

  Roofline GetRoofline(const RunConfig& cfg) const override {
    const ulysses::Dims d = ulysses::AttnDims(cfg);
    const double s = static_cast<double>(d.b * d.t * d.h * d.d) * ElementBytes(cfg.dtype);
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
PKB_REGISTER_PROBLEM(UlyssesGatherSeqScatterHeads);

}  // namespace
}  // namespace pkb
