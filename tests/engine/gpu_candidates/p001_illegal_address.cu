// Problem 1 on GPU, writes through a wild pointer. Expected: RUNTIME_ERROR (illegal address).
#include <cuda_runtime.h>

#include "pkb/candidate.h"

PKB_CANDIDATE_API_V1;

__global__ void wild(int* p) { p[threadIdx.x * 1000003] = 1; }

extern "C" int pkb_run(pkb_context* ctx, const pkb_tensor*, int, const pkb_scalar*, int,
                       pkb_tensor*, int) {
  wild<<<1, 32, 0, static_cast<cudaStream_t>(ctx->stream)>>>(reinterpret_cast<int*>(0x10));
  return 0;
}
