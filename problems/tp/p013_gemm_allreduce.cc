// Problem 13 — row-parallel linear: local GEMM, then all-reduce SUM of the partial products.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

constexpr int64_t kK = 512;  // PKB's fixed inner dimension

class GemmAllReduce : public Problem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        13,
        "13_gemm_allreduce",
        1,
        "generic (row-parallel linear)",
        "tensor parallel",
        R"md(Row-parallel linear layer: every rank multiplies its shards, then the partial products are
summed over WORLD.

- Inputs per rank r (drawn in this order on the device):
  `A_local` (M, 512) run dtype, randn; `B_local` (512, N) run dtype, randn. Every rank's
  shards differ.
- Computation: P_r = A_r @ B_r rounded to the run dtype (M, N); C = sum over r of P_r.
- Output: `C` (M, N) run dtype, identical on all ranks.
- Numerics: entries of P_r are ~N(0, 512) (std ~23) and C ~N(0, 512 W). The reference
  rounds each P_r to the dtype and sums with NCCL (bf16 rounding at every hop, in the
  ring's order). For W >= 4 another valid order (fp32 partials rounded once, a tree, a
  fused GEMM+reduce) differs from it by several bf16 ulps of the partial sums, so the
  check is |got - ref| <= atol + 0.01 |ref| with atol = max(0.01, 2 u sqrt(512) W sqrt(W))
  (u = 2^-8 for bf16: atol = 0.5 / 1.41 / 4.0 at W = 2 / 4 / 8). A candidate must match the
  exact sum of the W partial products to within that: any summation order, bf16 or fp32
  partials, passes; dropping or doubling one rank's partial (an error ~23) does not.
- Traffic: 2(W-1)/W * M*N*b bytes each way per rank (ring all-reduce).)md"};
    return i;
  }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    Inputs in;
    in.Add("A_local", at::randn({cfg.m, kK}, Opts(cfg)));
    in.Add("B_local", at::randn({kK, cfg.n}, Opts(cfg)));
    return in;
  }

  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    return {{"C", {cfg.m, cfg.n}, cfg.dtype}};
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    at::Tensor c = at::matmul(in[0], in[1]).contiguous();
    PKB_RETURN_IF_ERROR(comm.AllReduce(c, ReduceOp::kSum));
    return std::vector<at::Tensor>{c};
  }

  // Each partial rounded to the dtype as the reference does, then summed exactly (fp64) and
  // rounded once: one of the valid orders the tolerance admits.
  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    at::Tensor sum = at::zeros({cfg.m, cfg.n}, all[0][0].options().dtype(at::kDouble));
    for (const auto& in : all) sum += at::matmul(in[0], in[1]).to(at::kDouble);
    return std::vector<std::vector<at::Tensor>>(all.size(), {sum.to(cfg.dtype)});
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    const int w = cfg.world;
    const double sigma = std::sqrt(static_cast<double>(kK));  // std of one partial product
    const double atol =
        std::max(1e-2, 2.0 * UnitRoundoff(cfg.dtype) * sigma * w * std::sqrt(double(w)));
    Tolerance t;
    t.atol = atol;
    t.rtol = 1e-2;
    t.rationale = absl::StrCat(
        "bf16-SUM hazard (catalog): the sum of W dtype-rounded partials (std sqrt(512) ~ 23 each) "
        "depends on the summation order. Each of the ~2W roundings (W partials, W-1 hops) errs by "
        "up to u = 2^-8 (bf16) of a running sum of magnitude up to ~sqrt(W)*23, so atol = 2 u "
        "sqrt(512) W sqrt(W) = ",
        atol, " at W = ", w,
        ", rtol = 1e-2 (PKB's). Simulated over 4M elements, the largest "
        "atol needed by fp32-once / reversed / tree orders against the ring order was 0 / 0.46-"
        "0.67 / 1.7-2.2 at W = 2 / 4 / 8, so this is a ~2x margin; one rank's partial missing "
        "(error ~N(0, 512)) still fails on >85% of elements.");
    return t;
  }

  Roofline GetRoofline(const RunConfig& cfg) const override {
    const double b = ElementBytes(cfg.dtype);
    const double s = cfg.m * cfg.n * b;
    Roofline r;
    r.nvlink_bytes = AllReduceFactor(cfg.world) * s;
    r.hbm_bytes = (cfg.m * kK + kK * cfg.n) * b + s + r.nvlink_bytes;
    r.flops = 2.0 * cfg.m * cfg.n * kK + double(cfg.m) * cfg.n * (cfg.world - 1) / cfg.world;
    r.collective_bytes = s;
    r.busbw_factor = AllReduceFactor(cfg.world);
    return r;
  }
};
PKB_REGISTER_PROBLEM(GemmAllReduce);

}  // namespace
}  // namespace pkb
