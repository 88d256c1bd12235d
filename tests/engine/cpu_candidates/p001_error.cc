// Problem 1 on CPU, reports an error through the API. RUNTIME_ERROR with its message.
#include "common.h"
PKB_CANDIDATE_API_V1;
extern "C" int pkb_run(pkb_context* ctx, const pkb_tensor*, int, const pkb_scalar*, int,
                       pkb_tensor*, int) {
  ctx->set_error(ctx, "workspace too small for this shape");
  return 7;
}
