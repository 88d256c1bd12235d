// Problem 1 on CPU, forgets PKB_CANDIDATE_API_V1. RUNTIME_ERROR naming the missing declaration.
#include "common.h"
extern "C" int pkb_run(pkb_context*, const pkb_tensor*, int, const pkb_scalar*, int, pkb_tensor*,
                       int) {
  return 0;
}
