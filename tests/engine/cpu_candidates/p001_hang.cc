// Problem 1 on CPU, rank 0 never returns. TIMEOUT (the engine kills every rank).
#include "common.h"
PKB_CANDIDATE_API_V1;
extern "C" int pkb_run(pkb_context* ctx, const pkb_tensor*, int, const pkb_scalar*, int,
                       pkb_tensor*, int) {
  volatile bool forever = true;
  while (ctx->rank == 0 && forever) {
  }
  return 0;
}
