// Correct for the first calls (the verification trials), then stops working once it believes
// it is being timed. Outputs of timed iterations are spot-checked. Verdict: MISMATCH.
#include "common.h"
PKB_CANDIDATE_API_V1;
static int calls = 0;
extern "C" int pkb_run(pkb_context* ctx, const pkb_tensor* in, int, const pkb_scalar*, int,
                       pkb_tensor* out, int) {
  if (++calls > 5) return 0;
  if (allreduce_bf16(ctx, static_cast<const uint16_t*>(in[0].data),
                     static_cast<uint16_t*>(out[0].data), pkb_numel(&in[0]), false) != 0)
    return 1;
  return 0;
}
