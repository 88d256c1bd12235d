// Problem 1 (all-reduce SUM), correct for any W: a one-shot all-reduce over symmetric memory.
// Each rank copies its input into its symmetric buffer, the ranks meet at a device barrier,
// and every rank sums all peers' buffers straight over NVLink (fp32 accumulation, one rounding),
// then meets the others again so no buffer is overwritten while a peer still reads it.
// 16-byte loads and stores (8 bf16 per thread and step); one signal channel per block.
// With one rank the sum is the input itself: a single vectorized copy, no symmetric buffer and
// no barrier (a quarter of the traffic of the general path).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "pkb/candidate.h"
#include "pkb/device.cuh"

PKB_CANDIDATE_API_V1;

namespace {

constexpr int kThreads = 512;
pkb_symm g_symm;
size_t g_symm_bytes = 0;

__device__ __forceinline__ void add8(float (&acc)[8], uint4 v) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    float2 f = __bfloat1622float2(h[j]);
    acc[2 * j] += f.x;
    acc[2 * j + 1] += f.y;
  }
}

__global__ void allreduce_one_shot(const __nv_bfloat16* in, __nv_bfloat16* out, pkb_symm s,
                                   int rank, int world, int64_t n) {
  auto* local = static_cast<__nv_bfloat16*>(s.local);
  const int64_t vecs = n / 8;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = first; i < vecs; i += stride) {
    reinterpret_cast<uint4*>(local)[i] = reinterpret_cast<const uint4*>(in)[i];
  }
  for (int64_t i = vecs * 8 + first; i < n; i += stride) local[i] = in[i];  // tail
  pkb::barrier_block(s.signal_peers_dev, rank, world, blockIdx.x);
  for (int64_t i = first; i < vecs; i += stride) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int p = 0; p < world; ++p) add8(acc, pkb::peer_ptr<const uint4>(s.peers_dev, p)[i]);
    uint4 r;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&r);
#pragma unroll
    for (int j = 0; j < 4; ++j) h[j] = __floats2bfloat162_rn(acc[2 * j], acc[2 * j + 1]);
    reinterpret_cast<uint4*>(out)[i] = r;
  }
  for (int64_t i = vecs * 8 + first; i < n; i += stride) {
    float acc = 0.f;
    for (int p = 0; p < world; ++p) {
      acc += __bfloat162float(pkb::peer_ptr<const __nv_bfloat16>(s.peers_dev, p)[i]);
    }
    out[i] = __float2bfloat16(acc);
  }
  pkb::barrier_block(s.signal_peers_dev, rank, world, blockIdx.x);
}

__global__ void copy16(const uint4* in, uint4* out, int64_t vecs) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < vecs; i += stride) {
    out[i] = in[i];
  }
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
  cudaStream_t stream = static_cast<cudaStream_t>(ctx->stream);
  if (ctx->world_size == 1 && bytes % 16 == 0) {
    copy16<<<264, kThreads, 0, stream>>>(static_cast<const uint4*>(in[0].data),
                                         static_cast<uint4*>(out[0].data), int64_t(bytes / 16));
    return cudaGetLastError() == cudaSuccess ? 0 : 3;
  }
  if (bytes > g_symm_bytes) {  // every rank sees the same shapes, so this stays collective
    if (ctx->symm_alloc(ctx, bytes, &g_symm) != 0) return 2;
    g_symm_bytes = bytes;
  }
  int64_t want = (n / 8 + kThreads - 1) / kThreads;
  int blocks = int(want < 1 ? 1 : (want > PKB_SIGNAL_CHANNELS ? PKB_SIGNAL_CHANNELS : want));
  allreduce_one_shot<<<blocks, kThreads, 0, stream>>>(
      static_cast<const __nv_bfloat16*>(in[0].data), static_cast<__nv_bfloat16*>(out[0].data),
      g_symm, ctx->rank, ctx->world_size, n);
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
