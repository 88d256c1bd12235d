// Problem 1 on GPU, waits at the device barrier for a signal that never comes (it waits on a
// channel slot of a peer that does not exist, as a deadlocked rank would). Expected:
// RUNTIME_ERROR whose log names the rank and channel (pkb/device.cuh's bounded wait traps).
#include <cuda_runtime.h>

#define PKB_WAIT_TIMEOUT_CYCLES (200000000ll)  // ~0.1 s, to keep the test short
#include "pkb/candidate.h"
#include "pkb/device.cuh"

PKB_CANDIDATE_API_V1;

pkb_symm g_symm;
bool g_ready = false;

__global__ void wait_forever(pkb_symm s, int rank) {
  pkb::wait_signal(s.signal_peers_dev[rank], /*channel=*/7, /*peer=*/rank + 1, rank);
}

extern "C" int pkb_run(pkb_context* ctx, const pkb_tensor*, int, const pkb_scalar*, int,
                       pkb_tensor*, int) {
  if (!g_ready && ctx->symm_alloc(ctx, 4096, &g_symm) != 0) return 2;
  g_ready = true;
  wait_forever<<<1, 1, 0, static_cast<cudaStream_t>(ctx->stream)>>>(g_symm, ctx->rank);
  return 0;
}
