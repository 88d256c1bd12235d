// Problem 1 on CPU, leaves the last element unwritten. MISMATCH with one unwritten element.
#include "common.h"
PKB_CANDIDATE_API_V1;
extern "C" int pkb_run(pkb_context* ctx, const pkb_tensor* in, int, const pkb_scalar*, int,
                       pkb_tensor* out, int) {
  int64_t n = pkb_numel(&in[0]);
  std::vector<uint16_t> tmp(n);
  if (allreduce_bf16(ctx, static_cast<const uint16_t*>(in[0].data), tmp.data(), n, false) != 0)
    return 1;
  memcpy(out[0].data, tmp.data(), (n - 1) * 2);
  return 0;
}
