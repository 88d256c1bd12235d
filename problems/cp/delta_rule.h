// The naive recurrent delta rule that FLA's Kimi Delta Attention (problem 74) and Gated
// DeltaNet (problem 75) references run step by step, shared by their references, oracles and
// hazard tests.
//
//   S <- diag(decay_t) S;  u = (v_t - k_t^T S) beta_t;  S <- S + k_t u^T;  o_t = q_t^T S
//
// per batch-head, in the caller's dtype (fp32 in PKB), with the same op order as PKB's Python
// loop. `state` (BH, K, V) is the state before the first step (zeros for a whole sequence; the
// previous chunk's final state when a sequence is split) and holds the final state on return.
#ifndef PKB_PROBLEMS_CP_DELTA_RULE_H_
#define PKB_PROBLEMS_CP_DELTA_RULE_H_

#include <ATen/ATen.h>

namespace pkb {

// q, k (BH, T, K); v (BH, T, V); decay (BH, T, K) or (BH, T, 1); beta (BH, T).
// Returns o (BH, T, V).
at::Tensor DeltaRuleRecurrence(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const at::Tensor& decay, const at::Tensor& beta, at::Tensor& state);

// F.normalize(x, p=2, dim=-1, eps): x / max(||x||, eps).
at::Tensor L2Normalize(const at::Tensor& x, double eps);

}  // namespace pkb

#endif  // PKB_PROBLEMS_CP_DELTA_RULE_H_
