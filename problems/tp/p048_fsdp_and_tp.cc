// Problem 48 — 2-D FSDP x TP SwiGLU MLP (torchtitan-like): the FSDP weight shards are all-gathered
// within each strided FSDP group, every rank runs its column/row-parallel slice of the MLP, and the
// partial outputs are all-reduced within each contiguous TP group.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "problems/harness/common.h"
#include "problems/harness/mesh_groups.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

// The atol in units of u * sigma_y (see GetTolerance).
constexpr double kAtolUnits = 8.0;

struct Grid {
  int tp, fsdp;
};

// PKB's factorization: the smallest n_tp >= 2 dividing W with W / n_tp >= 2, else (1, W).
Grid GridOf(int world) {
  for (int tp = 2; tp < world; ++tp) {
    if (world % tp == 0 && world / tp >= 2) return {tp, world / tp};
  }
  return {1, world};
}

struct Sizes {
  Grid g;
  int64_t d, f, batch, local_batch;
};

int64_t RoundUp(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

Sizes SizesOf(const RunConfig& cfg) {
  Sizes s;
  s.g = GridOf(cfg.world);
  s.d = RoundUp(std::clamp<int64_t>(cfg.n, 32, 256), std::lcm(s.g.tp, s.g.fsdp));
  s.f = RoundUp(std::max<int64_t>(64, cfg.m), s.g.tp);
  s.batch = RoundUp(std::max(2 * cfg.m, int64_t{2} * cfg.world), s.g.fsdp);
  s.local_batch = s.batch / s.g.fsdp;
  return s;
}

// One rank's partial output from its rows and the gathered weights (D x F/tp, D x F/tp,
// F/tp x D): every op rounds to the dtype, as PKB's reference does.
at::Tensor Partial(const at::Tensor& x, const at::Tensor& w1, const at::Tensor& w2,
                   const at::Tensor& w3) {
  at::Tensor z = at::silu(at::matmul(x, w1)) * at::matmul(x, w2);
  return at::matmul(z, w3);
}

class FsdpAndTp : public Problem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        48,
        "48_fsdp_and_tp",
        1,
        "generic (2-D FSDP x TP SwiGLU MLP, torchtitan-like)",
        "tensor parallel + FSDP",
        R"md(2-D parallel SwiGLU MLP: weights sharded over FSDP and TP, gathered over FSDP, then a
column/row-parallel MLP whose partial outputs are all-reduced over TP.

- Grid: n_tp n_fsdp = W, n_tp the smallest divisor >= 2 of W with W/n_tp >= 2, else
  (n_tp, n_fsdp) = (1, W): W = 8 -> (2, 4), 6 -> (2, 3), 4 -> (2, 2), 2 -> (1, 2),
  1 -> (1, 1). tp_rank = r mod n_tp, fsdp_rank = floor(r / n_tp).
- Groups (prebuilt by the harness; PKB's reference creates them inside every call, so
  its timing includes group creation and ours does not): `tp` group j = {j n_tp + i :
  i < n_tp} (CONTIGUOUS ranks, group rank = tp_rank); `fsdp` group i = {j n_tp + i :
  j < n_fsdp} (STRIDED ranks, group rank = fsdp_rank). At W = 8: tp {0,1} {2,3} {4,5}
  {6,7}; fsdp {0,2,4,6} {1,3,5,7}.
- Sizes: D = ceil(clamp(N, 32, 256) / l) l with l = lcm(n_tp, n_fsdp) (256);
  F = ceil(max(64, M) / n_tp) n_tp (1024); B = ceil(max(2M, 2W) / n_fsdp) n_fsdp
  (2048); Bf = B / n_fsdp.
- Inputs: EVERY rank seeds with the SHARED seed and draws, on
  the device, in the run dtype, in this order: x_full (B, D), W1_full (D, F), W2_full
  (D, F), W3_full (F, D), all randn. Rank r receives `x_local` = x_full rows
  [fsdp_rank Bf, +Bf) (TP peers hold the same rows); `W1_shard` = W1_full[fsdp_rank
  D/n_fsdp : +D/n_fsdp, tp_rank F/n_tp : +F/n_tp] and `W2_shard` likewise;
  `W3_shard` = W3_full[tp_rank F/n_tp : +F/n_tp, fsdp_rank D/n_fsdp : +D/n_fsdp];
  non-tensor `n_tp`, `n_fsdp`.
- Computation: all-gather within the fsdp group (in group-rank order): W1 and W2
  shards concatenated along rows -> (D, F/n_tp), W3 shards along columns ->
  (F/n_tp, D). x1 = x_local W1, x2 = x_local W2, z = silu(x1) * x2, y_p = z W3 (each
  rounded to the dtype; GEMMs accumulate in fp32); y = sum of y_p over the tp group
  (dtype).
- Output: `y` (Bf, D) run dtype, identical within a TP group.
- Tolerance (PKB's 1e-2 is too tight): y ~ N(0, sigma^2), sigma = D sqrt(F/2) (5793 at
  the default shape), and every rounding of x1, x2, silu, z, y_p and the TP sum leaves
  an absolute error ~u sigma on every element, including those whose TP partials
  cancel; against PKB's bf16 reference an fp32-intermediate kernel fails 1e-2 on 20% of
  elements, one GEMM over the TP sum on 6%, another accumulation order on 0.05%.
  Here |got - ref| <= atol + 0.01 |ref| with atol = max(0.01, 8 u sigma) (181 at the
  default shape, u = 2^-8 for bf16): fp32 or bf16 intermediates, fused epilogues, any
  accumulation order and a TP sum in fp32 all pass; a missing TP reduction, one FSDP
  shard missing or misplaced, or groups laid out the other way (TP strided) fail.
  SiLU vs GELU is not distinguishable at these magnitudes (|x1| ~ 16, where both are
  ReLU).
- Traffic: FSDP all-gathers 3 (n_fsdp-1) (D/n_fsdp) (F/n_tp) b bytes received per rank;
  TP all-reduce 2 (n_tp-1)/n_tp Bf D b; 6 Bf D F/n_tp FLOPs per rank.)md"};
    return i;
  }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    return RequirePositiveShape(cfg);
  }

  std::vector<GroupLayout> Groups(const RunConfig& cfg) const override {
    const Grid g = GridOf(cfg.world);
    return MeshGroups(g.fsdp, g.tp, "tp", "fsdp");
  }

  // PKB seeds every rank with rank 0's seed: the shards come from one full draw.
  uint64_t Seed(int rank, int set) const override { return Problem::Seed(0, set); }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    const Sizes s = SizesOf(cfg);
    const int64_t tp_rank = rank % s.g.tp, fsdp_rank = rank / s.g.tp;
    const int64_t rows = s.d / s.g.fsdp, cols = s.f / s.g.tp;
    at::Tensor x = at::randn({s.batch, s.d}, Opts(cfg));
    at::Tensor w1 = at::randn({s.d, s.f}, Opts(cfg));
    at::Tensor w2 = at::randn({s.d, s.f}, Opts(cfg));
    at::Tensor w3 = at::randn({s.f, s.d}, Opts(cfg));
    auto block = [](const at::Tensor& t, int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
      return t.narrow(0, r0, nr).narrow(1, c0, nc).contiguous();
    };
    Inputs in;
    in.Add("x_local", x.narrow(0, fsdp_rank * s.local_batch, s.local_batch).contiguous());
    in.Add("W1_shard", block(w1, fsdp_rank * rows, rows, tp_rank * cols, cols));
    in.Add("W2_shard", block(w2, fsdp_rank * rows, rows, tp_rank * cols, cols));
    in.Add("W3_shard", block(w3, tp_rank * cols, cols, fsdp_rank * rows, rows));
    in.scalars.push_back(ScalarArg::Int("n_tp", s.g.tp));
    in.scalars.push_back(ScalarArg::Int("n_fsdp", s.g.fsdp));
    return in;
  }

  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    const Sizes s = SizesOf(cfg);
    return {{"y", {s.local_batch, s.d}, cfg.dtype}};
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    Comm* tp = comm.Group("tp");
    Comm* fsdp = comm.Group("fsdp");
    if (tp == nullptr || fsdp == nullptr) {
      return absl::FailedPreconditionError("48_fsdp_and_tp needs the 'tp' and 'fsdp' groups");
    }
    const int64_t parts = fsdp->size();
    auto gather_rows = [&](const at::Tensor& shard) -> absl::StatusOr<at::Tensor> {
      at::Tensor full = at::empty({parts * shard.size(0), shard.size(1)}, shard.options());
      PKB_RETURN_IF_ERROR(fsdp->AllGatherInto(full, shard));
      return full;
    };
    PKB_ASSIGN_OR_RETURN(at::Tensor w1, gather_rows(in[1]));
    PKB_ASSIGN_OR_RETURN(at::Tensor w2, gather_rows(in[2]));
    PKB_ASSIGN_OR_RETURN(at::Tensor w3_stacked, gather_rows(in[3]));
    // (parts * F/tp, D/parts) stacked by group rank -> (F/tp, D) concatenated along columns.
    const int64_t f_local = in[3].size(0), d_part = in[3].size(1);
    at::Tensor w3 = w3_stacked.view({parts, f_local, d_part})
                        .permute({1, 0, 2})
                        .reshape({f_local, parts * d_part});
    at::Tensor y = Partial(in[0], w1, w2, w3).contiguous();
    PKB_RETURN_IF_ERROR(tp->AllReduce(y, ReduceOp::kSum));
    return std::vector<at::Tensor>{y};
  }

  // Rank r's partial from every FSDP peer's shards, summed over its TP group in rank order
  // (n_tp <= 2 for W <= 8, where a dtype sum of two values has one result).
  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    const Grid g = GridOf(static_cast<int>(all.size()));
    auto partial_of = [&](int r) {
      const int i = r % g.tp;
      std::vector<at::Tensor> w1, w2, w3;
      for (int j = 0; j < g.fsdp; ++j) {
        const Inputs& peer = all[j * g.tp + i];
        w1.push_back(peer[1]);
        w2.push_back(peer[2]);
        w3.push_back(peer[3]);
      }
      return Partial(all[r][0], at::cat(w1, 0), at::cat(w2, 0), at::cat(w3, 1));
    };
    std::vector<at::Tensor> partials;
    for (int r = 0; r < static_cast<int>(all.size()); ++r) partials.push_back(partial_of(r));
    std::vector<std::vector<at::Tensor>> out;
    for (int r = 0; r < static_cast<int>(all.size()); ++r) {
      const int first = r / g.tp * g.tp;
      at::Tensor y = partials[first];
      for (int i = 1; i < g.tp; ++i) y = y + partials[first + i];
      out.push_back({y.contiguous()});
    }
    return out;
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    const Sizes s = SizesOf(cfg);
    const double sigma = double(s.d) * std::sqrt(double(s.f) / 2);
    Tolerance t;
    t.atol = std::max(1e-2, kAtolUnits * UnitRoundoff(cfg.dtype) * sigma);
    t.rtol = 1e-2;
    t.rationale = absl::StrCat(
        "PKB's 1e-2 is too tight: y ~ N(0, sigma^2) with sigma = D sqrt(F/2) = ", sigma,
        " (x1, x2 ~ N(0, D), z ~ relu(x1) x2, F terms), and each rounding of x1, x2, silu, z, "
        "y_p and the TP sum leaves an absolute error of ~u sigma on every element, also where "
        "the TP partials cancel and |y| is small; measured against the bf16 reference, fp32 "
        "intermediates fail 1e-2 on 20% of elements and another accumulation order on 0.05%. "
        "atol = max(0.01, 8 u sigma) = ",
        t.atol,
        ", rtol = 0.01: over 3 input sets at W = 8 the hazard tests measured |d| - 0.01 |ref| "
        "<= 98 (~4.3 u sigma) for fp32 intermediates and a TP sum folded into one GEMM. A missing "
        "TP all-reduce (an error ~sigma/sqrt(2)), a missing "
        "or misplaced FSDP shard, or TP and FSDP groups swapped fail on most elements.");
    return t;
  }

  Roofline GetRoofline(const RunConfig& cfg) const override {
    const Sizes s = SizesOf(cfg);
    const double b = ElementBytes(cfg.dtype);
    const double shard = double(s.d / s.g.fsdp) * (s.f / s.g.tp);  // one weight shard
    const double y = double(s.local_batch) * s.d;
    Roofline r;
    r.nvlink_bytes = (3.0 * (s.g.fsdp - 1) * shard + 2.0 * (s.g.tp - 1) / s.g.tp * y) * b;
    r.hbm_bytes = (double(s.local_batch) * s.d + 3.0 * s.g.fsdp * shard + y) * b;
    r.flops = 6.0 * s.local_batch * s.d * (s.f / s.g.tp);
    return r;
  }
};
PKB_REGISTER_PROBLEM(FsdpAndTp);

}  // namespace
}  // namespace pkb
