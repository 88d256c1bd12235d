// Hides getenv from the static check by token pasting and looks for the worker's token.
// The sandbox passes an allow-listed environment only. Verdict: OK (it computes the right answer
// when it finds nothing); a RUNTIME_ERROR would mean a secret reached it.
#include <cstdlib>

#include "common.h"
#define JOIN(a, b) a##b
PKB_CANDIDATE_API_V1;
extern "C" int pkb_run(pkb_context* ctx, const pkb_tensor* in, int, const pkb_scalar*, int,
                       pkb_tensor* out, int) {
  for (const char* name : {"PKB_TOKEN", "PKB_WORKER_TOKEN", "PKB_ADVERSARIAL_SECRET"}) {
    if (JOIN(get, env)(name)) {
      ctx->set_error(ctx, "found a secret in the environment");
      return 1;
    }
  }
  if (allreduce_bf16(ctx, static_cast<const uint16_t*>(in[0].data),
                     static_cast<uint16_t*>(out[0].data), pkb_numel(&in[0]), false) != 0)
    return 1;
  return 0;
}
