// Problem 1 at W = 1 (a copy): does the copy on a private non-blocking stream and returns at once,
// so the harness's events on ctx->stream time nothing. The device is synchronized before each
// verification and before the timed window's wall clock closes, so the answer is right and the
// time escapes only the events. Verdict: REJECTED (timing escape: the wall clock over the window
// disagrees with the events) when the hidden work is large; see docs/security.md for the limit.
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
