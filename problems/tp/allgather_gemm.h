// What the statements of problems 11 and 12 (all-gather of A's column blocks, then a GEMM with
// this rank's B) share: the inputs and the computation.
#ifndef PKB_PROBLEMS_TP_ALLGATHER_GEMM_H_
#define PKB_PROBLEMS_TP_ALLGATHER_GEMM_H_

namespace pkb::tp {

// The rule on W, the inputs and the product.
inline constexpr char kInputsAndProduct[] = R"md(- W must divide K = 512.
- Inputs per rank r (drawn in this order on the device):
  `A_local` (M, 512/W) run dtype, randn; `B` (512, N) run dtype, randn. Both differ on every
  rank (B too: it is drawn from the rank's seed).
- Computation: A (M, 512) = [A_0 | A_1 | ... | A_{W-1}] (rank s's columns at K-block s);
  C_r = A @ B_r (fp32 accumulation, one rounding to the run dtype).
)md";

}  // namespace pkb::tp

#endif  // PKB_PROBLEMS_TP_ALLGATHER_GEMM_H_
