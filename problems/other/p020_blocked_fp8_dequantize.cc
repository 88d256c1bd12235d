// Problem 20 — block dequantization (values times one scale per 128 consecutive elements) of W
// chunks, then an all-to-all that sends chunk c to rank c.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

constexpr int64_t kBlock = 128;  // PKB's block_size

// x = fp32(fp32(y) * s), one scale per block of 128 consecutive elements of the flattened
// tensor. PKB's Triton kernel loads y as fp32 and s in its own dtype, so the product is fp32
// (exact for bf16 and fp16) except for float64 runs, where it is taken in fp64 and rounded to
// fp32 on the store; promoting both to fp64 and rounding once reproduces every case.
at::Tensor Dequantize(const at::Tensor& y, const at::Tensor& s) {
  at::Tensor blocks = y.to(at::kFloat).to(at::kDouble).reshape({-1, kBlock});
  at::Tensor scales = s.to(at::kDouble).reshape({-1, 1});
  return (blocks * scales).to(at::kFloat).reshape(y.sizes()).contiguous();
}

class BlockedFp8Dequantize : public Problem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        20,
        "20_blocked_fp8_dequantize",
        1,
        "generic (block dequantization followed by an all-to-all)",
        "other (block dequantize + all-to-all)",
        R"md(Block dequantization of W chunks, then an all-to-all: rank r dequantizes its chunk c and
sends it to rank c. Despite the name NO FP8 DATA IS INVOLVED: the "quantized" values and
the scales are ordinary run-dtype tensors.

- Requires 128 | M N (a chunk holds whole blocks; PKB asserts it).
- Inputs per rank r (drawn in this order on the device):
  `y` (W, M, N) run dtype, randn; `s` (W, M N/128) run dtype, randn (scales, can be
  negative); non-tensor `block_size` = 128. Both differ per rank.
- Computation: x[c, i, j] = fp32(y[c, i, j]) * s[c, floor((i N + j) / 128)], the
  product in fp32 (fp64 for float64 runs, then rounded to fp32): blocks are runs of
  128 consecutive elements of chunk c in row-major order, and never straddle chunks.
  Then all-to-all with equal splits along dim 0: chunk c goes to rank c.
- Output: `out` (W, M, N) float32 (whatever the run dtype); out[c] on rank r = chunk r
  as dequantized by rank c.
- Compared bit for bit: a bf16 x bf16 (or fp16 x fp16) product is exact in fp32, and a
  float32 product has one correctly rounded value. (On an H200 this reference matched
  PKB's Triton kernel on every element, 5 trials x 8 ranks, for all four run dtypes.)
- Traffic: the reference sends fp32 results, (W-1) M N 4 bytes each way per rank;
  sending y and s in the run dtype and dequantizing after the exchange needs only
  (W-1) (M N + M N/128) b. FLOPs: W M N multiplies.)md"};
    return i;
  }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    PKB_RETURN_IF_ERROR(RequirePositiveShape(cfg));
    if ((cfg.m * cfg.n) % kBlock != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "20_blocked_fp8_dequantize scales each (M, N) chunk in blocks of 128 consecutive "
          "elements: M N = ",
          cfg.m * cfg.n, " must be a multiple of 128"));
    }
    return absl::OkStatus();
  }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    Inputs in;
    in.Add("y", at::randn({cfg.world, cfg.m, cfg.n}, Opts(cfg)));
    in.Add("s", at::randn({cfg.world, cfg.m * cfg.n / kBlock}, Opts(cfg)));
    in.scalars.push_back(ScalarArg::Int("block_size", kBlock));
    return in;
  }

  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    return {{"out", {cfg.world, cfg.m, cfg.n}, at::kFloat}};
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    at::Tensor x = Dequantize(in[0], in[1]);
    at::Tensor out = at::empty_like(x);
    PKB_RETURN_IF_ERROR(comm.AllToAllSingle(out, x, {}, {}));
    return std::vector<at::Tensor>{out};
  }

  // out[c] on rank r is rank c's chunk r, dequantized with rank c's scales.
  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    const int64_t w = static_cast<int64_t>(all.size());
    std::vector<std::vector<at::Tensor>> out;
    for (int64_t r = 0; r < w; ++r) {
      std::vector<at::Tensor> chunks;
      for (const auto& in : all) chunks.push_back(Dequantize(in[0][r], in[1][r]));
      out.push_back({at::stack(chunks, 0)});
    }
    return out;
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    return {0, 0, true,
            "Bit-exact: each element is one product, exact in fp32 for bf16 and fp16 inputs "
            "(8 or 11 significant bits each) and correctly rounded for float32, then moved by "
            "the all-to-all; measured on an H200 to match PKB's Triton kernel on every element "
            "(5 trials x 8 ranks, bf16, fp16, fp32, fp64). A scale applied to the wrong block, a "
            "chunk sent to the wrong rank or a product rounded to the run dtype changes the "
            "bits."};
  }

  Roofline GetRoofline(const RunConfig& cfg) const override {
    const double b = ElementBytes(cfg.dtype);
    const double elems = double(cfg.m) * cfg.n;  // one chunk
    const double scales = elems / kBlock;
    Roofline r;
    // The minimum sends y and s (y at most 4 bytes: it is rounded to fp32 first).
    r.nvlink_bytes = (cfg.world - 1) * (elems * std::min(b, 4.0) + scales * b);
    r.hbm_bytes = cfg.world * (elems * b + scales * b + elems * 4.0);  // read y and s, write out
    r.flops = cfg.world * elems;
    r.collective_bytes = cfg.world * elems * 4.0;  // the reference's fp32 all-to-all
    r.busbw_factor = AllGatherFactor(cfg.world);
    return r;
  }
};
PKB_REGISTER_PROBLEM(BlockedFp8Dequantize);

}  // namespace
}  // namespace pkb
