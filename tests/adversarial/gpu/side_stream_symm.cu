// Problem 1 at any W: side_stream.cu's escape with a real all-reduce. The sum runs over symmetric
// memory (a device barrier, then every rank reads all peers' buffers, as the worked example
// does), but on a private non-blocking stream, four passes long, and the call returns at once,
// so the harness's stream holds nothing of it. Verification synchronizes the device, so the
// trials pass; the outputs of the picked timed iterations are copied on the harness's stream
// right after the call, before the hidden sum has landed. Expected verdict at every W, in a
// functional run on one GPU as in a run on W GPUs: MISMATCH in the timed iterations.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "pkb/candidate.h"
#include "pkb/device.cuh"

PKB_CANDIDATE_API_V1;

namespace {

constexpr int kThreads = 512;
cudaStream_t hidden;
pkb_symm symm;
size_t symm_bytes = 0;

__global__ void hidden_allreduce(const __nv_bfloat16* in, __nv_bfloat16* out, pkb_symm s, int rank,
                                 int world, int64_t n, int passes) {
  auto* local = static_cast<__nv_bfloat16*>(s.local);
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = first; i < n; i += stride) local[i] = in[i];
  pkb::barrier_block(s.signal_peers_dev, rank, world, blockIdx.x);
  for (int pass = 0; pass < passes; ++pass) {
    for (int64_t i = first; i < n; i += stride) {
      float acc = 0.f;
      for (int p = 0; p < world; ++p) {
        acc += __bfloat162float(pkb::peer_ptr<const __nv_bfloat16>(s.peers_dev, p)[i]);
      }
      out[i] = __float2bfloat16(acc);
    }
  }
  pkb::barrier_block(s.signal_peers_dev, rank, world, blockIdx.x);
}

}  // namespace

extern "C" int pkb_run(pkb_context* ctx, const pkb_tensor* in, int, const pkb_scalar*, int,
                       pkb_tensor* out, int) {
  if (!hidden && cudaStreamCreateWithFlags(&hidden, cudaStreamNonBlocking) != cudaSuccess) return 1;
  const int64_t n = pkb_numel(&in[0]);
  const size_t bytes = size_t(n) * sizeof(__nv_bfloat16);
  if (bytes > symm_bytes) {  // the same shapes on every rank: collective on every rank
    if (ctx->symm_alloc(ctx, bytes, &symm) != 0) return 2;
    symm_bytes = bytes;
  }
  const int64_t want = (n + kThreads - 1) / kThreads;
  const int blocks = int(want < 1 ? 1 : (want > PKB_SIGNAL_CHANNELS ? PKB_SIGNAL_CHANNELS : want));
  hidden_allreduce<<<blocks, kThreads, 0, hidden>>>(static_cast<const __nv_bfloat16*>(in[0].data),
                                                    static_cast<__nv_bfloat16*>(out[0].data), symm,
                                                    ctx->rank, ctx->world_size, n, 4);
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
