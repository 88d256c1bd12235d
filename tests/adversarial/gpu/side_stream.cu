// Problem 1 at W = 1 (a copy): does the copy on a private non-blocking stream and returns at once,
// so the harness's events on ctx->stream time nothing. Verification synchronizes the device, so
// the trials pass; in the timed window the outputs of randomly picked iterations are copied aside
// on the harness's stream right after the call, before the hidden copy has landed, and the
// outputs are re-poisoned after each use. Verdict on the H200 (2026-12-03): MISMATCH. (The
// wall-clock check would reject it as a timing escape as well if the outputs were right.)
#include <cuda_runtime.h>

#include "pkb/candidate.h"

PKB_CANDIDATE_API_V1;

static cudaStream_t hidden;

__global__ void slow_copy(const uint4* in, uint4* out, int64_t n, int repeat) {
  for (int r = 0; r < repeat; ++r) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x) {
      out[i] = in[i];
    }
  }
}

extern "C" int pkb_run(pkb_context*, const pkb_tensor* in, int, const pkb_scalar*, int,
                       pkb_tensor* out, int) {
  if (!hidden) cudaStreamCreateWithFlags(&hidden, cudaStreamNonBlocking);
  int64_t n = pkb_numel(&in[0]) * 2 / 16;
  // 50 passes: about 100 us of hidden work per call, far above the wall-clock check's slack.
  slow_copy<<<264, 512, 0, hidden>>>(static_cast<const uint4*>(in[0].data),
                                     static_cast<uint4*>(out[0].data), n, 50);
  return 0;
}
