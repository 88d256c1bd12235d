// Problem 1 on CPU, correct, with the light ATen glue (pkb/aten_core.h) and one op's header, as
// docs/candidate-api.md shows: at::clone runs in ATen, resolved against the libtorch the rank
// process has loaded (engine_e2e_test). Expected verdict: OK.
#include <ATen/ops/clone.h>

#include "common.h"
#include "pkb/aten_core.h"
PKB_CANDIDATE_API_V1;
extern "C" int pkb_run(pkb_context* ctx, const pkb_tensor* in, int, const pkb_scalar*, int,
                       pkb_tensor* out, int) {
  // The sum is the shared helper's, over a copy ATen made of the input.
  at::Tensor copy = at::clone(pkb::as_tensor(in[0]));
  if (copy.numel() != pkb_numel(&in[0])) return 1;
  return allreduce_bf16(ctx, static_cast<const uint16_t*>(copy.data_ptr()),
                        static_cast<uint16_t*>(out[0].data), pkb_numel(&in[0]), false) != 0;
}
