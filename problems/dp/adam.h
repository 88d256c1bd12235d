// The Adam step and the two-layer MLP that problems 40 (DDP), 41 (ZeRO-1), 42 (ZeRO-2),
// 43 (sharded Adam + unshard) and 47 (FSDP step) share, written once with PKB's op order.
//
// The MLP: h = relu(X W1^T + b1), o = h W2^T + b2, loss = mean((o - y)^2), gradients by autograd
// in the run dtype, flattened in the order W1, b1, W2, b2 (torch._utils._flatten_dense_tensors).
// Every rank draws it from the shared seed 42 + 1000 p + 1000003 set: X_full and y_full, of
// which it keeps its own rows, then W1, b1, W2, b2 from the same stream, kept on rank 0 only
// (other ranks hold zeros, as in PKB).
//
// Adam (no weight decay; PKB's code, every op rounded to the dtype):
//   m = m * b1 + (1 - b1) g;  v = v * b2 + (1 - b2) g g;  m_hat = m / (1 - b1^step);
//   v_hat = v / (1 - b2^step);  d = m_hat / (sqrt(v_hat) + eps);  p = p + d * (-lr).
#ifndef PKB_PROBLEMS_DP_ADAM_H_
#define PKB_PROBLEMS_DP_ADAM_H_

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "problems/harness/common.h"
#include "problems/harness/problem.h"

namespace pkb::dp {

// PKB's optimizer scalars; every set keeps them except the step (1 + set mod 7, as PKB's trial)
// and, in the stronger sets of the MLP problems, the learning rate (see StrongLr).
struct AdamHyper {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  int64_t step = 1;
};

// Share of elements that may use the looser bound (see Tolerance::outlier_fraction).
constexpr double kOutlierFraction = 1e-3;

int64_t PkbStep(int set);

// Appends lr, beta1, beta2, eps (and weight_decay when `wd` >= 0), then step: PKB's order.
void AddHyper(Inputs& in, const AdamHyper& h, double wd = -1);

double Scalar(const Inputs& in, const std::string& name);

AdamHyper ReadHyper(const Inputs& in);

// Updates m and v in place from the gradient g and returns the direction
// m_hat / (sqrt(v_hat) + eps), each op rounded to the dtype in PKB's order.
at::Tensor AdamDirection(at::Tensor& m, at::Tensor& v, const at::Tensor& g, const AdamHyper& h);

// The update of 40-43: p += (direction * (-lr)), the product rounded before the sum.
void AdamUpdate(at::Tensor& p, at::Tensor& m, at::Tensor& v, const at::Tensor& g,
                const AdamHyper& h);

// The stronger input sets (set > 0) start Adam from a state PKB never tests: the moments after
// one earlier step with a gradient h = scale * randn(shape), m = (1 - b1) h and
// v = (1 - b2) h h (each op in the dtype). A candidate that ignores its incoming moments (PKB's
// are zeros) then fails, and the update m_hat / sqrt(v_hat) is no longer the sign of g.
struct Moments {
  at::Tensor m, v;
};
Moments HistoryOf(const at::Tensor& g, const AdamHyper& h);
Moments DrawHistory(const RunConfig& cfg, at::IntArrayRef shape, double scale, const AdamHyper& h);

// Statement fragments shared by the problems' markdown.
inline constexpr char kAdamFormula[] =
    "  m = m * beta1 + (1 - beta1) g; v = v * beta2 + (1 - beta2) g g;\n"
    "  m_hat = m / (1 - beta1^step); v_hat = v / (1 - beta2^step);\n"
    "  p = p + (m_hat / (sqrt(v_hat) + eps)) * (-lr)  (the quotient, then the product, then the\n"
    "  sum rounded to the dtype; Python-float scalars).\n";
inline constexpr char kShardedSizes[] =
    "- Sizes: n_tot = ceil(max(M, W) / W) * W rows, c = n_tot / W per rank;\n"
    "  d_in = clamp(N, 16, 256), d_out = clamp(N / 4, 8, 256), hid the smallest h >=\n"
    "  clamp(N / 2, 32, 512) (of the 1024 PKB tries) with W | P = h d_in + h + d_out h + d_out\n"
    "  (hid = 512, P = 262912 = 2^8 * 1027 at the default N, so W must be a power of two <= 256\n"
    "  there; CanImplement rejects the rest).\n";
inline constexpr char kZeroInputs[] =
    "- Inputs (the same on EVERY rank, drawn in this order on\n"
    "  the device, run dtype): X_full (n_tot, d_in) and y_full (n_tot, d_out) randn; rank r\n"
    "  gets `X_local`, `y_local` = rows [r c, (r+1) c). Then, on rank 0 only, `W1` (hid,\n"
    "  d_in), `b1` (hid), `W2` (d_out, hid), `b2` (d_out) randn; other ranks hold zeros.\n"
    "  `exp_avg_part`, `exp_avg_sq_part` (P/W): zeros (PKB's set 0). In the other sets every\n"
    "  rank draws the four parameters (ranks > 0 then zero them, keeping the streams aligned),\n"
    "  then H = randn(P), each tensor's part times the RMS of that tensor's gradient over all\n"
    "  n_tot rows at rank 0's parameters, and holds exp_avg_part = 0.1 H, exp_avg_sq_part =\n"
    "  0.001 H H, slice [r P/W, (r+1) P/W) (the state after one earlier step).\n"
    "  Scalars: lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, step = 1 + set mod 7.\n";
// 41 and 42's first two steps.
inline constexpr char kZeroForwardSteps[] =
    R"md(- Computation (PKB's, every op in the run dtype; the inputs are not modified):
  1. Broadcast the flattened [W1, b1, W2, b2] (P elements) from rank 0.
  2. The MLP's MSE forward and backward on this rank's rows, as in problem 40
     (autograd in the dtype); flatten the gradients in the same order.
)md";

inline constexpr char kStepTolerances[] =
    "- Tolerances (u = 2^-8 in bf16): PKB's atol = 1e-2 passes the unchanged parameters (the\n"
    "  step is ~lr = 1e-3). Parameters: |d| <= 16 u lr + 2u |expected|, except that up to\n"
    "  0.1% of the elements may be within 2.5 lr + 2u |expected|: from zero moments Adam's first\n"
    "  step is lr * sign(g), and where the averaged gradient is zero within rounding another\n"
    "  reduction order or GEMM may flip that sign. exp_avg (m): rtol = 8u, atol = 4u max(W, 2)\n"
    "  times the mean |expected| of the output's nonzero elements. exp_avg_sq (v): rtol = 12u,\n"
    "  atol = 8u max(W, 2) times that mean. PKB's atol = 1e-2 is as large as the moments\n"
    "  themselves at the default shape (v is ~1e-3 g^2): it would pass zeros, a rank left out or\n"
    "  a sum instead of a mean. The scaled atol: a bf16 reduction in another order moves the\n"
    "  mean gradient by up to ~W/2 ulps of its partial sums, many ulps where the sum cancels.\n";

// The MLP's sizes at the run's shape.
struct MlpShape {
  int64_t n_tot = 0;  // rows of X_full, a multiple of W
  int64_t chunk = 0;  // rows per rank
  int64_t d_in = 0, hid = 0, d_out = 0;
  int64_t numel() const { return hid * d_in + hid + d_out * hid + d_out; }
  std::vector<std::vector<int64_t>> ParamShapes() const {
    return {{hid, d_in}, {hid}, {d_out, hid}, {d_out}};
  }
};

// Forward and backward FLOPs of one rank's rows.
double MlpFlops(const MlpShape& s);

int64_t Clamp(int64_t x, int64_t lo, int64_t hi);

// Problem 40's sizes: hid = clamp(N / 2, 32, 512), any W.
MlpShape DdpShape(const RunConfig& cfg);

// The sharded problems' sizes (41, 42, 47): hid grows from problem 40's value until W divides
// the parameter count; PKB tries 1024 values and raises otherwise (any W divisible by 3 at the
// default N, since P = 513 hid + 256 there).
absl::StatusOr<MlpShape> ShardedShape(const RunConfig& cfg);

struct MlpDraw {
  at::Tensor x_full, y_full;       // every rank's rows
  at::Tensor x, y;                 // this rank's rows (chunk, d_in) and (chunk, d_out)
  std::vector<at::Tensor> params;  // W1, b1, W2, b2: random on rank 0, zeros elsewhere
  std::vector<at::Tensor> model;   // the drawn W1..b2 (empty where this rank drew none)
};

// Who holds random parameters. PKB: rank 0 draws W1, b1, W2, b2 and the other ranks hold zeros
// without drawing. The stronger sets keep every rank's stream aligned for what it draws next:
// every rank draws them, then ranks > 0 zero them (kAligned) or keep them (kShared, 47).
enum class ParamDraw { kPkb, kAligned, kShared };

// X_full, y_full (randn in the dtype on the device), this rank's rows, then the parameters
// (randn) continuing the stream. The caller has seeded with the shared seed.
MlpDraw DrawMlp(const RunConfig& cfg, const MlpShape& s, int rank, ParamDraw who = ParamDraw::kPkb);

at::Tensor Flatten(const std::vector<at::Tensor>& ts);

std::vector<at::Tensor> Unflatten(const at::Tensor& flat,
                                  const std::vector<std::vector<int64_t>>& shapes);

// This rank's flat gradient of the MSE loss (autograd in the dtype, as PKB's loss.backward()).
at::Tensor LocalGrad(const at::Tensor& x, const at::Tensor& y,
                     const std::vector<at::Tensor>& params);

// The MLP problems' earlier step (sets > 0): H = randn(P), each parameter tensor's part scaled by
// the RMS of that tensor's gradient over all rows (the averaged gradient of this step, which
// every rank can compute from X_full and y_full), so the earlier step and this one weigh alike
// in every tensor (a bias's gradient is far smaller than a weight's). Returns the flat m and v.
Moments MlpHistory(const RunConfig& cfg, const MlpShape& s, const MlpDraw& d, const AdamHyper& h);

// Problems 41 and 42 (ZeRO-1, ZeRO-2): the MLP draw with hid from ShardedShape, then this rank's
// `exp_avg_part` and `exp_avg_sq_part` (P / W): zeros in PKB's set 0; in the stronger sets slice
// r of a history over all P parameters drawn on every rank (MlpHistory).
Inputs ZeroInputs(const RunConfig& cfg, const MlpShape& s, int rank, int set);

std::vector<OutputDecl> ZeroOutputs(const RunConfig& cfg, const MlpShape& s);

// The mean over ranks of the flat gradients, summed exactly (fp64 holds any sum of W dtype
// values) and rounded once, then divided by W in the dtype as PKB does.
at::Tensor MeanOfRanks(const std::vector<at::Tensor>& grads);

// 41 and 42 after the gradient reduction: rank r's Adam on slice r of the flat parameters and
// of `mean` (the averaged flat gradient), then the gathered parameters. Rank r's outputs.
std::vector<std::vector<at::Tensor>> ZeroOracle(const std::vector<Inputs>& all, const MlpShape& s);

// Updated parameters. PKB rounds each of ~8 ops of the step d = lr * m_hat / (sqrt(v_hat) + eps)
// (<= ~8u of |d| <= ~1.05 lr for the states the sets draw); a fused kernel rounds once: atol
// 16 u lr. The output's own rounding may go either way: rtol = `roundings` u (2, 3 for 47's
// second axpy). With `flips`, the gradient is reduced across ranks and up to 0.1% of elements
// may instead be within 2.5 lr: a step's sign where the averaged gradient is zero within rounding.
Tolerance ParamTolerance(const RunConfig& cfg, double lr, bool flips, int roundings = 2);

// The updated moments. m = b1 m_in + (1 - b1) g and v = b2 v_in + (1 - b2) g^2 carry the averaged
// gradient. A bf16 reduction rounds at every hop: another order moves the mean by up to ~W/2
// ulps of the partial sums, which are larger than the mean where the ranks' gradients cancel
// (measured: 9 ulps of m, 15% of an element, between MPI's ring and an exact sum at W = 8). That
// error follows the size of the output's typical element, not its own: atol_mean_abs, growing
// with W. At W = 1 it covers another GEMM (autograd in fp64, or in another order).
double ReductionSlack(const RunConfig& cfg);

Tolerance ExpAvgTolerance(const RunConfig& cfg);

// v is ~1e-3 g^2 from PKB's zero state, so PKB's atol = 1e-2 passes anything of that size at
// the default shape (zeros, a rank left out, a sum): the bound here is relative to v itself and
// to the output's typical |v|. v's relative error is twice g's.
Tolerance ExpAvgSqTolerance(const RunConfig& cfg);

// 41 and 42: W1, b1, W2, b2, exp_avg_part, exp_avg_sq_part.
Tolerance ZeroTolerance(const RunConfig& cfg, int index);

}  // namespace pkb::dp

#endif  // PKB_PROBLEMS_DP_ADAM_H_
