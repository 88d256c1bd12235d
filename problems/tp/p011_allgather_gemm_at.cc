// Problem 11 — all-gather of a K-sharded activation done on its transpose (A^T), then a local
// GEMM with this rank's B computed as (B^T A^T)^T.
#include "absl/strings/str_cat.h"
#include "problems/harness/common.h"
#include "problems/harness/registry.h"
#include "problems/tp/allgather_gemm.h"

namespace pkb {
namespace {

constexpr int64_t kK = 512;  // PKB's fixed inner dimension

class AllGatherGemmAT : public Problem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        11,
        "11_allgather_gemm_AT",
        1,
        "generic (all-gather of a K-sharded activation before a GEMM, gathered as A^T)",
        "tensor parallel",
        R"md(All-gather a K-sharded A over WORLD, then multiply by this rank's own B. The reference
gathers the transposed shards (A^T is row-sharded, so the gather is along dim 0) and
computes (B^T A^T)^T; any route to the same C is fine.

)md" + std::string(tp::kInputsAndProduct) +
            R"md(- Output: `C` (M, N) run dtype, different on every rank. PKB's reference returns a strided
  (transposed) view; layout does not matter, only values.
- Numerics: |C| ~ sqrt(512) ~ 23; one GEMM with fp32 accumulation. PKB's tolerance
  |got - ref| <= 0.01 + 0.01 |ref| admits any accumulation order (<= 1 bf16 ulp, 0.8 %).
- Traffic: (W-1) * M*(512/W)*b bytes each way per rank. FLOPs: 2*M*N*512.)md"};
    return i;
  }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    PKB_RETURN_IF_ERROR(RequirePositiveShape(cfg));
    return RequireDivides(cfg.world, kK,
                          "11_allgather_gemm_AT shards K = 512 evenly: the world size must "
                          "divide 512");
  }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    Inputs in;
    in.Add("A_local", at::randn({cfg.m, kK / cfg.world}, Opts(cfg)));
    in.Add("B", at::randn({kK, cfg.n}, Opts(cfg)));
    return in;
  }

  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    return {{"C", {cfg.m, cfg.n}, cfg.dtype}};
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    const int w = comm.size();
    at::Tensor a_t_local = in[0].t().contiguous();                           // (K/W, M)
    at::Tensor a_t = at::empty({w * (kK / w), cfg.m}, a_t_local.options());  // (K, M)
    PKB_RETURN_IF_ERROR(comm.AllGatherInto(a_t, a_t_local));
    at::Tensor c_t = at::matmul(in[1].t(), a_t);  // (N, M)
    return std::vector<at::Tensor>{c_t.t().contiguous()};
  }

  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    std::vector<at::Tensor> blocks;
    for (const auto& in : all) blocks.push_back(in[0]);
    at::Tensor a = at::cat(blocks, 1);
    std::vector<std::vector<at::Tensor>> res;
    for (const auto& in : all) res.push_back({at::matmul(a, in[1]).contiguous()});
    return res;
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    Tolerance t;
    t.rationale =
        "PKB's 1e-2: C is one fp32-accumulated GEMM rounded once (|C| ~ 23), so any "
        "accumulation order or operand layout is within 1 bf16 ulp (0.8 % relative); one rank's "
        "K-block missing changes C by ~N(0, 512/W) and fails.";
    return t;
  }

  Roofline GetRoofline(const RunConfig& cfg) const override {
    const double b = ElementBytes(cfg.dtype);
    const double shard = cfg.m * (kK / cfg.world) * b;
    Roofline r;
    r.nvlink_bytes = (cfg.world - 1) * shard;
    r.hbm_bytes = shard + cfg.world * shard + (cfg.m * kK + kK * cfg.n + cfg.m * cfg.n) * b;
    r.flops = 2.0 * cfg.m * cfg.n * kK;
    r.collective_bytes = cfg.world * shard;
    r.busbw_factor = AllGatherFactor(cfg.world);
    return r;
  }
};
PKB_REGISTER_PROBLEM(AllGatherGemmAT);

}  // namespace
}  // namespace pkb
