// Problem 1 at W = 1: allocates memory on its first call hoping to receive the pages where the
// reference left its answer, and returns whatever it finds there (the "freed memory holds the
// answer" exploit). The candidate runs before the reference on every trial, and the reference's
// outputs are poisoned before they are freed. Verdict: MISMATCH.
#include <cuda_runtime.h>

#include "pkb/candidate.h"

PKB_CANDIDATE_API_V1;

extern "C" int pkb_run(pkb_context* ctx, const pkb_tensor* in, int, const pkb_scalar*, int,
                       pkb_tensor* out, int) {
  size_t bytes = size_t(pkb_numel(&in[0])) * 2;
  void* scavenged = nullptr;
  if (cudaMalloc(&scavenged, bytes * 64) != cudaSuccess) return 1;
  // Hand over a block of the scavenged pages as the answer.
  cudaMemcpyAsync(out[0].data, static_cast<char*>(scavenged) + bytes, bytes,
                  cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(ctx->stream));
  cudaStreamSynchronize(static_cast<cudaStream_t>(ctx->stream));
  cudaFree(scavenged);
  return 0;
}
