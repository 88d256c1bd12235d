// Writes its answer into the input buffer too, so that the reference (run after it on the same
// inputs) would see doctored inputs, and leaves the inputs changed. Verdict: MISMATCH (the
// harness checks that inputs come back unchanged).
#include <cstring>

#include "common.h"
PKB_CANDIDATE_API_V1;
extern "C" int pkb_run(pkb_context* ctx, const pkb_tensor* in, int, const pkb_scalar*, int,
                       pkb_tensor* out, int) {
  int64_t n = pkb_numel(&in[0]);
  if (allreduce_bf16(ctx, static_cast<const uint16_t*>(in[0].data),
                     static_cast<uint16_t*>(out[0].data), n, false) != 0)
    return 1;
  std::memcpy(in[0].data, out[0].data, n * 2);
  return 0;
}
