// Problem 15 — sequence/tensor-parallel MLP block: all-gather the hidden shards, GEMM + SiLU on
// every row, keep this rank's row block, second GEMM, reduce-scatter by row blocks.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

constexpr int64_t kHidden = 256;  // PKB's hidden size before rounding up to a multiple of W
constexpr int64_t kFfn = 512;     // PKB's fixed FFN width F

int64_t RoundUp(int64_t v, int64_t multiple) { return (v + multiple - 1) / multiple * multiple; }

// PKB's derived sizes: M' rows (M rounded up to a multiple of W), hidden H (256 rounded up),
// H/W hidden columns per rank and m = M'/W rows in each rank's output block.
struct Dims {
  int64_t rows, hidden, hidden_local, block;
};

Dims GetDims(const RunConfig& cfg) {
  Dims d;
  d.rows = RoundUp(cfg.m, cfg.world);
  d.hidden = RoundUp(kHidden, cfg.world);
  d.hidden_local = d.hidden / cfg.world;
  d.block = d.rows / cfg.world;
  return d;
}

class CombinedShardedGemms : public Problem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        15,
        "15_combined_sharded_gemms",
        1,
        "generic (sequence/tensor-parallel MLP: gather hidden shards, GEMM + SiLU, second GEMM, "
        "reduce-scatter)",
        "tensor parallel",
        R"md(An MLP block over a hidden dimension sharded across WORLD: the shards are gathered, each
rank applies its own two-layer MLP (GEMM, SiLU, GEMM) and keeps one block of rows.

- Any W. Dims: M' = ceil(M/W)*W rows, H = ceil(256/W)*W hidden (256 when W | 256),
  H_l = H/W, F = 512, m = M'/W (M' = M when W | M).
- Inputs per rank r (drawn in this order on the device):
  `x_local` (M', H_l) run dtype, randn; `W1` (H, F) run dtype, randn; `W2` (F, H) run
  dtype, randn. All differ per rank (every rank has its own W1 and W2).
- Computation: X = [x_local_0 | x_local_1 | ... | x_local_{W-1}] (M', H), the
  concatenation along COLUMNS in rank order (identical on every rank);
  A = SiLU(X @ W1_r) with the GEMM rounded to the dtype, then SiLU rounded (M', F);
  rank r keeps rows [r m, (r+1) m) of A and returns Y_r = A[block r] @ W2_r (one GEMM,
  rounded to the dtype). The reference computes A on all M' rows, places Y_r in row
  block r of a zero (M', H) buffer and reduce-scatters it by row blocks (SUM): every
  other rank contributes zeros, so rank r receives exactly Y_r.
- Output: `y_local` (m, H) run dtype, different per rank.
- Only rows [r m, (r+1) m) of every peer's x_local are needed (an all-to-all of
  (W-1) m H_l elements), GEMM1 is needed on m rows only, and the reduce-scatter moves
  nothing but zeros: all three are fair game.
- Numerics: |Y| has std ~250 (bf16 ulp 1-2). Checked with |got - ref| <= atol + 0.01 |ref|,
  atol = max(0.01, 4 u sqrt(F) sqrt(H/2)) (u = 2^-8 for bf16: atol = 4.0). This admits
  any accumulation order and a fused kernel that keeps X @ W1 or SiLU's output in fp32
  (the exact answer needs atol ~2); a wrong row block, weight or a missing rank shard
  fails on most elements.
- Traffic: the reference all-gathers (W-1) M' H_l b and reduce-scatters (W-1) m H b
  bytes each way per rank; the minimum is (W-1) m H_l b. FLOPs: reference
  2 M' H F + 2 m F H, minimum 4 m H F.)md"};
    return i;
  }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    return RequirePositiveShape(cfg);
  }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    const Dims d = GetDims(cfg);
    Inputs in;
    in.Add("x_local", at::randn({d.rows, d.hidden_local}, Opts(cfg)));
    in.Add("W1", at::randn({d.hidden, kFfn}, Opts(cfg)));
    in.Add("W2", at::randn({kFfn, d.hidden}, Opts(cfg)));
    return in;
  }

  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    const Dims d = GetDims(cfg);
    return {{"y_local", {d.block, d.hidden}, cfg.dtype}};
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    const int64_t w = comm.size(), r = comm.rank();
    const at::Tensor& x_local = in[0];
    const int64_t rows = x_local.size(0), block = rows / w;
    at::Tensor shards = at::empty({w, rows, x_local.size(1)}, x_local.options());
    PKB_RETURN_IF_ERROR(comm.AllGatherInto(shards, x_local.contiguous()));
    // (W, M', H_l) -> (M', W, H_l) -> (M', H): torch.cat(list, dim=1).
    at::Tensor x = shards.permute({1, 0, 2}).reshape({rows, w * x_local.size(1)});
    at::Tensor a = at::silu(at::matmul(x, in[1]));  // every row, as PKB does
    at::Tensor y = at::matmul(a.narrow(0, r * block, block).contiguous(), in[2]);
    at::Tensor buf = at::zeros({rows, y.size(1)}, y.options());
    buf.narrow(0, r * block, block).copy_(y);
    at::Tensor out = at::empty_like(y);
    PKB_RETURN_IF_ERROR(comm.ReduceScatterInto(out, buf, ReduceOp::kSum));
    return std::vector<at::Tensor>{out};
  }

  // X assembled from every rank's shard; each rank's MLP on its own row block only.
  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    const Dims d = GetDims(cfg);
    std::vector<at::Tensor> shards;
    for (const auto& in : all) shards.push_back(in[0]);
    at::Tensor x = at::cat(shards, 1);
    std::vector<std::vector<at::Tensor>> out;
    for (size_t r = 0; r < all.size(); ++r) {
      at::Tensor rows = x.narrow(0, static_cast<int64_t>(r) * d.block, d.block);
      at::Tensor a = at::silu(at::matmul(rows, all[r][1]));
      out.push_back({at::matmul(a, all[r][2]).contiguous()});
    }
    return out;
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    const Dims d = GetDims(cfg);
    const double spread = std::sqrt(double(kFfn)) * std::sqrt(d.hidden / 2.0);
    const double atol = std::max(1e-2, 4.0 * UnitRoundoff(cfg.dtype) * spread);
    Tolerance t;
    t.atol = atol;
    t.rtol = 1e-2;
    t.rationale = absl::StrCat(
        "Intermediate-rounding hazard: Y = A @ W2 sums F = 512 products of A (rms ~sqrt(H/2) ~ "
        "11, SiLU of ~N(0, H)) and W2 (~N(0, 1)). An element of A that differs by a rounding "
        "(a GEMM1 accumulation order that flips a bf16 rounding, or a fused kernel that keeps "
        "X @ W1 or SiLU's output in fp32) moves Y by up to u |A| |W2|; summed over F with random "
        "signs that is ~u sqrt(F) sqrt(H/2) = 1.0 (bf16) times a few. Largest atol needed at "
        "rtol = 1e-2 against the reference, measured with cuBLAS on an H200 (5 trials, every "
        "rank, W = 2 and 8, default shape): 0 (GEMM1 on the rank's row block only), 0.58 "
        "(fused: fp32 X @ W1, bf16 A), 2.0 (A in fp32 or fp64, i.e. the exact answer); in bf16 "
        "emulation on CPU, 0.24 for GEMMs accumulated in another order (rounding flips only), "
        "which PKB's atol = 1e-2 fails on ~1e-4 of elements. So atol = max(0.01, 4 u sqrt(F) "
        "sqrt(H/2)) = ",
        atol,
        ", rtol = 1e-2: a 2x margin over the exact answer, ~0.016 of Y's std ~250. One rank's "
        "x shard missing fails >90% of elements at W = 2..8, a wrong weight or row block fails "
        "on most, and GELU instead of SiLU (error std 1.5) on ~6e-4 of them (~700 of 1.3M in 5 "
        "trials on the H200), which is enough.");
    return t;
  }

  // Minimum work (what a candidate must do), not the reference's: the floor must stay below
  // any correct candidate.
  Roofline GetRoofline(const RunConfig& cfg) const override {
    const Dims d = GetDims(cfg);
    const double b = ElementBytes(cfg.dtype);
    Roofline r;
    r.nvlink_bytes = (cfg.world - 1) * double(d.block) * d.hidden_local * b;
    // Every row of x_local is read by some rank, both weights are read, Y is written.
    r.hbm_bytes =
        (double(d.rows) * d.hidden_local + 2.0 * d.hidden * kFfn + double(d.block) * d.hidden) * b;
    r.flops = 4.0 * d.block * d.hidden * kFfn;
    return r;
  }
};
PKB_REGISTER_PROBLEM(CombinedShardedGemms);

}  // namespace
}  // namespace pkb
