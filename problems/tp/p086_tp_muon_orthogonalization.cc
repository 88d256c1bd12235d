// Problem 86 — Muon's Newton–Schulz orthogonalization of a column-sharded (tensor-parallel)
// matrix: the Frobenius norm and every step's Gram matrix X X^T are all-reduced over WORLD.
#include <array>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

constexpr int64_t kRows = 512;
constexpr int kSteps = 5;
constexpr double kEps = 1e-7;

// NVIDIA Emerging-Optimizers' "quintic" coefficients (a, b, c), one row per step.
constexpr std::array<std::array<double, 3>, kSteps> kQuintic = {{{4.0848, -6.8946, 2.9270},
                                                                 {3.9505, -6.3029, 2.6377},
                                                                 {3.7418, -5.5913, 2.3037},
                                                                 {2.8769, -3.1427, 1.2046},
                                                                 {2.8366, -3.0525, 1.2012}}};

int64_t GlobalCols(const RunConfig& cfg) {
  const int64_t base = cfg.n < 4096 ? 512 : 1024;
  return (base + cfg.world - 1) / cfg.world * cfg.world;
}

// One step on the rows of X that this process holds, given the (all-reduced) Gram matrix.
at::Tensor Step(const at::Tensor& x, const at::Tensor& gram, int s) {
  const auto& [a, b, c] = kQuintic[s];
  at::Tensor update = at::addmm(gram, gram, gram, /*beta=*/b, /*alpha=*/c);
  return at::addmm(x, update, x, /*beta=*/a, /*alpha=*/1.0);
}

class TpMuonOrthogonalization : public Problem {
 public:
  // The shape is fixed (512 x 512 Newton-Schulz); one input set keeps W = 8 under
  // 30 s.
  TestShape CpuTestShape() const override { return {64, 64, 1}; }

  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        86,
        "86_tp_muon_orthogonalization",
        1,
        "Muon optimizer Newton-Schulz orthogonalization under tensor parallelism (coefficients "
        "of NVIDIA Emerging-Optimizers)",
        "tensor parallel",
        R"md(Five quintic Newton-Schulz steps that approximately orthogonalize a 512 x Cg matrix
whose columns are split across WORLD: rank r holds columns [r Cl, (r+1) Cl).

- Any W. Cg = roundup(512 if N < 4096 else 1024, W), Cl = Cg / W (64 at W = 8).
- Inputs per rank r (drawn on the device):
  `x` (512, Cl) bfloat16 whatever the run dtype: randn, then + 0.01 r (in bf16);
  non-tensor `steps` = 5, `coefficient_type` = quintic (code 1; PKB passes the
  string), `partition_dim` = 1 (columns are sharded).
- Computation, all in fp32 (TF32 off):
  X = fp32(x); X /= max(sqrt(all-reduce SUM of sum(X^2)), 1e-7);
  for s = 0..4 with (a, b, c) = (4.0848, -6.8946, 2.9270), (3.9505, -6.3029, 2.6377),
  (3.7418, -5.5913, 2.3037), (2.8769, -3.1427, 1.2046), (2.8366, -3.0525, 1.2012):
    G = all-reduce SUM of X X^T (512 x 512); U = b G + c G G; X = a X + U X.
  out = bf16(X).
- Output: `out` (512, Cl) bfloat16: the rank's columns of the orthogonalized matrix.
- Tolerance: atol = 2e-3, rtol = 2^-7 (entries are ~0.04 and the singular values end
  in ~[0.7, 1.2]). Any fp32 arrangement of the GEMMs passes (fused addmm or not, U X
  as b G X + c G (G X), another reduction order or split of G G across ranks), and so
  does rounding X to bf16 between steps or feeding bf16 operands to tensor-core GEMMs
  with fp32 accumulation. A missing all-reduce of G or of the norm, a wrong step's
  coefficients (another set, or b and c swapped) or a missing step fails. PKB's atol
  = 1e-2 is ~25% of an entry and would pass several of these.
- Traffic: 5 all-reduces of a 512 x 512 fp32 Gram (1 MiB) plus one scalar.
  FLOPs 5 (4 * 512^2 Cl + 2 * 512^3) per rank (G G is replicated; it can be split).)md"};
    return i;
  }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    return RequirePositiveShape(cfg);
  }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    const int64_t cl = GlobalCols(cfg) / cfg.world;
    at::Tensor x = at::randn({kRows, cl}, Opts(cfg).dtype(at::kBFloat16)) + 0.01 * rank;
    Inputs in;
    in.Add("x", x);
    in.scalars.push_back(ScalarArg::Int("steps", kSteps));
    in.scalars.push_back(ScalarArg::Int("coefficient_type", 1));  // 0 simple, 1 quintic, ...
    in.scalars.push_back(ScalarArg::Int("partition_dim", 1));
    return in;
  }

  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    return {{"out", {kRows, GlobalCols(cfg) / cfg.world}, at::kBFloat16}};
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    at::Tensor x = in[0].to(at::kFloat);
    at::Tensor norm_sq = (x * x).sum();
    PKB_RETURN_IF_ERROR(comm.AllReduce(norm_sq, ReduceOp::kSum));
    x = x / at::sqrt(norm_sq).clamp_min(kEps);
    for (int s = 0; s < kSteps; ++s) {
      at::Tensor gram = at::matmul(x, x.t()).contiguous();
      PKB_RETURN_IF_ERROR(comm.AllReduce(gram, ReduceOp::kSum));
      x = Step(x, gram, s);
    }
    return std::vector<at::Tensor>{x.to(at::kBFloat16).contiguous()};
  }

  // The whole 512 x Cg matrix in one process; rank r's output is its columns.
  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    std::vector<at::Tensor> shards;
    for (const auto& in : all) shards.push_back(in[0].to(at::kFloat));
    at::Tensor x = at::cat(shards, 1);
    x = x / at::sqrt((x * x).sum()).clamp_min(kEps);
    for (int s = 0; s < kSteps; ++s) x = Step(x, at::matmul(x, x.t()), s);
    at::Tensor out = x.to(at::kBFloat16);
    const int64_t cl = out.size(1) / static_cast<int64_t>(all.size());
    std::vector<std::vector<at::Tensor>> result;
    for (size_t r = 0; r < all.size(); ++r)
      result.push_back({out.narrow(1, r * cl, cl).contiguous()});
    return result;
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    return Tolerance{
        2e-3, std::ldexp(1.0, -7), false,
        "Entries are ~0.04 (1/sqrt(512)); atol = 2e-3 (~5% of an entry) and rtol = 2^-7 (one "
        "bf16 ulp). Newton-Schulz damps perturbations, so fp32 GEMMs in any order or fusion "
        "differ by ~1 bf16 ulp, and bf16 operands with fp32 accumulation (tensor cores) or X "
        "rounded to bf16 between steps by a few ulps. A Gram or norm without the all-reduce, "
        "another coefficient set, swapped b and c, or four steps instead of five move entries "
        "by 10-100%. PKB's atol = 1e-2 is a quarter of an entry."};
  }

  Roofline GetRoofline(const RunConfig& cfg) const override {
    const double cl = static_cast<double>(GlobalCols(cfg) / cfg.world), n = kRows;
    const double gram = 4.0 * n * n;
    Roofline r;
    r.nvlink_bytes = AllReduceFactor(cfg.world) * (kSteps * gram + 4.0);
    r.hbm_bytes = 2.0 * 2 * n * cl + kSteps * 3 * gram;  // x in, out; G, G G, U per step
    r.flops = kSteps * (4.0 * n * n * cl + 2.0 * n * n * n);
    return r;
  }
};
PKB_REGISTER_PROBLEM(TpMuonOrthogonalization);

}  // namespace
}  // namespace pkb
