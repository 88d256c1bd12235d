// Computes the first call's answer and replays it for every later call (cached outputs across
// calls). Every verification trial draws new inputs. Verdict: MISMATCH.
#include <vector>

#include "common.h"
PKB_CANDIDATE_API_V1;
static std::vector<uint16_t> cached;
extern "C" int pkb_run(pkb_context* ctx, const pkb_tensor* in, int, const pkb_scalar*, int,
                       pkb_tensor* out, int) {
  int64_t n = pkb_numel(&in[0]);
  auto* o = static_cast<uint16_t*>(out[0].data);
  if (cached.empty()) {
    if (allreduce_bf16(ctx, static_cast<const uint16_t*>(in[0].data), o, n, false) != 0) return 1;
    cached.assign(o, o + n);
  } else {
    std::copy(cached.begin(), cached.begin() + std::min<int64_t>(n, cached.size()), o);
  }
  return 0;
}
