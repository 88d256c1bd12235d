// Problem 1 on CPU, "knows" PKB's fixed inputs and writes W(W+1)/2 without communicating.
// Passes trial 0 (PKB's inputs) and must fail trial 1 (seeded random inputs). MISMATCH.
#include "common.h"
PKB_CANDIDATE_API_V1;
extern "C" int pkb_run(pkb_context* ctx, const pkb_tensor* in, int, const pkb_scalar*, int,
                       pkb_tensor* out, int) {
  int w = ctx->world_size;
  uint16_t v = float_to_bf16(float(w * (w + 1) / 2));
  auto* o = static_cast<uint16_t*>(out[0].data);
  for (int64_t i = 0; i < pkb_numel(&out[0]); ++i) o[i] = v;
  return 0;
}
