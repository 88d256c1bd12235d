// Problem 1, SUBTLY WRONG on purpose (a test fixture): the peer loop starts at the local rank
// and wraps once too far, so the local contribution is counted twice. MISMATCH expected.
// Each rank copies its input into its symmetric buffer, the ranks meet at a device barrier,
// and every rank sums all peers' buffers straight over NVLink (fp32 accumulation, one rounding),
// then meets the others again so no buffer is overwritten while a peer still reads it.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "pkb/candidate.h"
#include "pkb/device.cuh"

PKB_CANDIDATE_API_V1;

namespace {

constexpr int kBlocks = 32;  // one signal channel per block
constexpr int kThreads = 512;
pkb_symm g_symm;
size_t g_symm_bytes = 0;

__global__ void allreduce_one_shot(const __nv_bfloat16* in, __nv_bfloat16* out, pkb_symm s,
                                   int rank, int world, int64_t n) {
  auto* local = static_cast<__nv_bfloat16*>(s.local);
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = first; i < n; i += stride) local[i] = in[i];
  pkb::barrier_block(s.signal_peers_dev, rank, world, blockIdx.x);
  for (int64_t i = first; i < n; i += stride) {
    float acc = 0.f;
    for (int k = 0; k <= world; ++k) {
      const int p = (rank + k) % world;
      acc += __bfloat162float(pkb::peer_ptr<__nv_bfloat16>(s.peers_dev, p)[i]);
    }
    out[i] = __float2bfloat16(acc);
  }
  pkb::barrier_block(s.signal_peers_dev, rank, world, blockIdx.x);
}

}  // namespace

extern "C" int pkb_run(pkb_context* ctx, const pkb_tensor* in, int n_in, const pkb_scalar*, int,
                       pkb_tensor* out, int n_out) {
  if (n_in != 1 || n_out != 1 || in[0].dtype != PKB_BFLOAT16 || !pkb_is_contiguous(&in[0])) {
    ctx->set_error(ctx, "this example handles one contiguous bf16 input");
    return 1;
  }
  const int64_t n = pkb_numel(&in[0]);
  const size_t bytes = size_t(n) * sizeof(__nv_bfloat16);
  if (bytes > g_symm_bytes) {  // every rank sees the same shapes, so this stays collective
    if (ctx->symm_alloc(ctx, bytes, &g_symm) != 0) return 2;
    g_symm_bytes = bytes;
  }
  allreduce_one_shot<<<kBlocks, kThreads, 0, static_cast<cudaStream_t>(ctx->stream)>>>(
      static_cast<const __nv_bfloat16*>(in[0].data), static_cast<__nv_bfloat16*>(out[0].data),
      g_symm, ctx->rank, ctx->world_size, n);
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
