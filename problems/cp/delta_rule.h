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

// q, k (BH, T, K); v (BH, T, V); decay (BH, T, K) or (BH, T, 1); beta (BH, T). Returns o (BH, T,
// V).
inline at::Tensor DeltaRuleRecurrence(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const at::Tensor& decay, const at::Tensor& beta,
                                      at::Tensor& state) {
  const int64_t t_len = q.size(1);
  at::Tensor out = at::empty({q.size(0), t_len, v.size(2)}, v.options());
  for (int64_t t = 0; t < t_len; ++t) {
    at::Tensor k_t = k.select(1, t);
    state = decay.select(1, t).unsqueeze(-1) * state;
    at::Tensor projected = at::bmm(k_t.unsqueeze(1), state).squeeze(1);
    at::Tensor update = (v.select(1, t) - projected) * beta.select(1, t).unsqueeze(-1);
    state = state + k_t.unsqueeze(-1) * update.unsqueeze(1);
    out.select(1, t).copy_(at::bmm(q.select(1, t).unsqueeze(1), state).squeeze(1));
  }
  return out;
}

// F.normalize(x, p=2, dim=-1, eps): x / max(||x||, eps).
inline at::Tensor L2Normalize(const at::Tensor& x, double eps) {
  return x / x.norm(2, {-1}, /*keepdim=*/true).clamp_min(eps);
}

}  // namespace pkb

#endif  // PKB_PROBLEMS_CP_DELTA_RULE_H_
