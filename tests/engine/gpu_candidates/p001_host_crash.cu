// Problem 1 on GPU, the host code aborts after allocating GPU memory. Expected: RUNTIME_ERROR,
// and no process or GPU memory left behind.
#include <cuda_runtime.h>

#include <cstdlib>

#include "pkb/candidate.h"

PKB_CANDIDATE_API_V1;

extern "C" int pkb_run(pkb_context*, const pkb_tensor*, int, const pkb_scalar*, int, pkb_tensor*,
                       int) {
  void* p = nullptr;
  cudaMalloc(&p, size_t(1) << 30);
  std::abort();
}
