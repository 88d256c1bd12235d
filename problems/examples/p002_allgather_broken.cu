// Problem 2, DOES NOT COMPILE on purpose (a test fixture): a kernel launched with a missing
// argument. COMPILE_ERROR expected.
#include <cuda_runtime.h>

#include "pkb/candidate.h"

PKB_CANDIDATE_API_V1;

__global__ void copy(const char* in, char* out, long n) {
  for (long i = threadIdx.x; i < n; i += blockDim.x) out[i] = in[i];
}

extern "C" int pkb_run(pkb_context* ctx, const pkb_tensor* in, int, const pkb_scalar*, int,
                       pkb_tensor* out, int) {
  copy<<<1, 256>>>(static_cast<const char*>(in[0].data), static_cast<char*>(out[0].data));
  return 0;
}
