// Problem 1, DOES NOT COMPILE on purpose (a test fixture): an undeclared identifier that nvcc reports
// with file:line. COMPILE_ERROR expected.
#include <cuda_runtime.h>

#include "pkb/candidate.h"

PKB_CANDIDATE_API_V1;

extern "C" int pkb_run(pkb_context* ctx, const pkb_tensor* in, int, const pkb_scalar*, int,
                       pkb_tensor* out, int) {
  int64_t n = pkb_numel(&in[0]);
  cudaMemcpyAsync(out[0].data, in[0].data, n * 2, cudaMemcpyDeviceToDevice,
                  static_cast<cudaStream_t>(ctx->stream));
  return undeclared_status;
}
