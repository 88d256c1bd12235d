// Problem 38 — Ulysses gather_seq_scatter_heads_qkv: the all-to-all of a fused QKV projection's
// output, which scatters whole heads of Q, K and V together and gathers the sequence.
#include "problems/cp/ulysses.h"
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

constexpr int64_t kSeqDim = 1;

// qkv (B, T, 3 H D) viewed as (B, T, 3, H D): the axis split over the ranks is the last one.
at::Tensor AsQkv(const at::Tensor& x) { return x.view({x.size(0), x.size(1), 3, x.size(2) / 3}); }

class UlyssesGatherSeqScatterHeadsQkv : public Problem {
 public:
  // 128 x 256: at 64 x 64 PKB's B = M/64 and T = N/64 would be 1.
  TestShape CpuTestShape() const override { return {128, 256}; }

  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        38,
        "38_ulysses_gather_seq_scatter_heads_qkv",
        1,
        "VeOmni / verl Ulysses sequence parallel: gather_seq_scatter_heads_qkv",
        "context parallel",
        R"md(The Ulysses all-to-all of a fused QKV projection, over WORLD. Sizes: B = max(1, M/64),
T = max(1, N/64) (the local sequence), H = 8, D = 64, so H D = 512 (B = T = 16 at M =
N = 1024). Requires W | 8 (PKB's builder asserts it), so each rank gets whole heads.

- Inputs per rank r (on the device): `qkv_tensor`
  (B, T, 3 H D) run dtype, randn, different on every rank; features [0, HD) are Q,
  [HD, 2HD) K, [2HD, 3HD) V. Int scalars `seq_dim` = 1, `unpadded_dim_size` = 0 (PKB's
  None: no unpadding), `restore_shape` = 1.
- Computation: view qkv as (B, T, 3, H D); split the last axis into W chunks of c = H
  D / W features (H/W whole heads); chunk j of Q, K and V goes to rank j; concatenate
  along the sequence in source-rank order and view back to 3-D:
  out[b, s T + t, q c + i] = x_s[b, t, q H D + r c + i] for q = 0, 1, 2 and i < c.
  So rank r holds [its Q heads | its K heads | its V heads] for the whole sequence.
  At W = 1 the result is qkv.
- Output on every rank: `out` (B, W T, 3 H D / W) run dtype (different on every rank).
- Tolerance: bit-exact. Every output element is a copy of one input element, so a
  correct kernel reproduces its bits.
- Traffic: (W-1)/W * B T 3 H D b bytes each way per rank. FLOPs: 0.)md"};
    return i;
  }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    PKB_RETURN_IF_ERROR(RequirePositiveShape(cfg));
    return ulysses::RequireWorldDividesHeads(cfg, "38_ulysses_gather_seq_scatter_heads_qkv");
  }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    const ulysses::Dims d = ulysses::AttnDims(cfg);
    Inputs in;
    in.Add("qkv_tensor", at::randn({d.b, d.t, 3 * d.h * d.d}, Opts(cfg)));
    in.scalars.push_back(ScalarArg::Int("seq_dim", kSeqDim));
    in.scalars.push_back(ScalarArg::Int("unpadded_dim_size", 0));
    in.scalars.push_back(ScalarArg::Int("restore_shape", 1));
    return in;
  }

  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    const ulysses::Dims d = ulysses::AttnDims(cfg);
    return {{"out", {d.b, cfg.world * d.t, 3 * d.h * d.d / cfg.world}, cfg.dtype}};
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    const at::Tensor x = in[0].contiguous();
    PKB_ASSIGN_OR_RETURN(at::Tensor out,
                         ulysses::ListAllToAll(comm, AsQkv(x), /*scatter_dim=*/3, kSeqDim));
    return std::vector<at::Tensor>{out.view({x.size(0), -1, x.size(2) / comm.size()})};
  }

  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    std::vector<at::Tensor> xs;
    for (const Inputs& in : all) xs.push_back(AsQkv(in[0]));
    std::vector<std::vector<at::Tensor>> res;
    for (size_t r = 0; r < all.size(); ++r) {
      at::Tensor out = ulysses::AllToAllOracle(xs, r, 3, kSeqDim);
      res.push_back({out.view({out.size(0), out.size(1), -1})});
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
    const double s = static_cast<double>(d.b * d.t * 3 * d.h * d.d) * ElementBytes(cfg.dtype);
    const double f = static_cast<double>(cfg.world - 1) / cfg.world;
    Roofline r;
    r.nvlink_bytes = f * s;
    r.hbm_bytes = 2 * s;  // read qkv, write out
    r.flops = 0;
    r.collective_bytes = s;
    r.busbw_factor = f;
    return r;
  }
};
PKB_REGISTER_PROBLEM(UlyssesGatherSeqScatterHeadsQkv);

}  // namespace
}  // namespace pkb
