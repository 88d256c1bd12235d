#include "problems/cp/delta_rule.h"

namespace pkb {

at::Tensor DeltaRuleRecurrence(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const at::Tensor& decay, const at::Tensor& beta, at::Tensor& state) {
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

at::Tensor L2Normalize(const at::Tensor& x, double eps) {
  return x / x.norm(2, {-1}, /*keepdim=*/true).clamp_min(eps);
}

}  // namespace pkb
