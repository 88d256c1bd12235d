// Problem 37 — Ulysses gather_heads_scatter_seq: the all-to-all after attention that trades each
// rank's head group over the full sequence back for a sequence shard of all heads.
#include "problems/cp/ulysses.h"
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

constexpr int64_t kSeqDim = 1, kHeadDim = 2;

// The sequence zero-padded to a multiple of W, as PKB's helper does before splitting it.
int64_t PaddedSeq(int64_t t, int64_t w) { return (t + w - 1) / w * w; }

at::Tensor PadSeq(const at::Tensor& x, int64_t w) {
  const int64_t t = x.size(kSeqDim), padded = PaddedSeq(t, w);
  if (padded == t) return x;
  std::vector<int64_t> shape = x.sizes().vec();
  shape[kSeqDim] = padded - t;
  return at::cat({x, at::zeros(shape, x.options())}, kSeqDim);
}

class UlyssesGatherHeadsScatterSeq : public Problem {
 public:
  // 128 x 384: at 64 x 64 PKB's B = M/64 and T = N/64 would be 1; T = 6 pads
  // at W = 4, 8.
  TestShape CpuTestShape() const override { return {128, 384}; }

  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        37,
        "37_ulysses_gather_heads_scatter_seq",
        1,
        "VeOmni / verl Ulysses sequence parallel: gather_heads_scatter_seq",
        "context parallel",
        R"md(The Ulysses all-to-all after attention, over WORLD: scatter sequence, gather heads.
Sizes: B = max(1, M/64), T = max(1, N/64), H = 8, D = 64 (B = T = 16 at M = N =
1024). Requires W | 8 (PKB's builder asserts it).

- Inputs per rank r (on the device): `x` (B, T, H,
  D) run dtype, randn, different on every rank; int scalars `seq_dim` = 1, `head_dim` =
  2.
- Computation: (1) if W does not divide T, zero-pad the sequence at its end to Tp =
  ceil(T/W) W positions (never at the default shape; e.g. T = 6 at W = 4); (2) rank r
  sends positions [j Tp/W, (j+1) Tp/W) of every head to rank j; (3) it concatenates
  what it receives along the heads in source-rank order:
  out[b, t, s H + h, d] = x_s[b, r Tp/W + t, h, d] (zero for padded positions).
  At W = 1 the result is x.
- Output on every rank: `out` (B, Tp/W, W H, D) run dtype (different on every rank).
- Tolerance: bit-exact. Every output element is a copy of one input element or a
  padding zero, so a correct kernel reproduces its bits.
- Traffic: (W-1)/W * B Tp H D b bytes each way per rank. FLOPs: 0.)md"};
    return i;
  }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    PKB_RETURN_IF_ERROR(RequirePositiveShape(cfg));
    return ulysses::RequireWorldDividesHeads(cfg, "37_ulysses_gather_heads_scatter_seq");
  }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    const ulysses::Dims d = ulysses::AttnDims(cfg);
    Inputs in;
    in.Add("x", at::randn({d.b, d.t, d.h, d.d}, Opts(cfg)));
    in.scalars.push_back(ScalarArg::Int("seq_dim", kSeqDim));
    in.scalars.push_back(ScalarArg::Int("head_dim", kHeadDim));
    return in;
  }

  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    const ulysses::Dims d = ulysses::AttnDims(cfg);
    const int64_t w = cfg.world;
    return {{"out", {d.b, PaddedSeq(d.t, w) / w, w * d.h, d.d}, cfg.dtype}};
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    PKB_ASSIGN_OR_RETURN(
        at::Tensor out, ulysses::ListAllToAll(comm, PadSeq(in[0], comm.size()), kSeqDim, kHeadDim));
    return std::vector<at::Tensor>{out};
  }

  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    const int64_t w = static_cast<int64_t>(all.size());
    std::vector<at::Tensor> xs;
    for (const Inputs& in : all) xs.push_back(PadSeq(in[0], w));
    std::vector<std::vector<at::Tensor>> res;
    for (int64_t r = 0; r < w; ++r) {
      res.push_back({ulysses::AllToAllOracle(xs, r, kSeqDim, kHeadDim)});
    }
    return res;
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    return {0, 0, true,
            "Every element is a copy of one input element or a padding zero (no arithmetic), so "
            "a correct kernel reproduces its bits: bit-exact."};
  }

  Roofline GetRoofline(const RunConfig& cfg) const override {
    const ulysses::Dims d = ulysses::AttnDims(cfg);
    const double in_bytes = static_cast<double>(d.b * d.t * d.h * d.d) * ElementBytes(cfg.dtype);
    const double s =
        static_cast<double>(d.b * PaddedSeq(d.t, cfg.world) * d.h * d.d) * ElementBytes(cfg.dtype);
    const double f = static_cast<double>(cfg.world - 1) / cfg.world;
    Roofline r;
    r.nvlink_bytes = f * s;
    r.hbm_bytes = in_bytes + s;  // read x, write out (padding included)
    r.flops = 0;
    r.collective_bytes = s;
    r.busbw_factor = f;
    return r;
  }
};
PKB_REGISTER_PROBLEM(UlyssesGatherHeadsScatterSeq);

}  // namespace
}  // namespace pkb
