// Problem 2, SUBTLY WRONG on purpose (a test fixture): the copy loop stops one vector short of
// each slot, leaving the last 8 bf16 elements of every slot unwritten. MISMATCH expected.
// its symmetric buffer, the ranks meet at a device barrier, and each rank copies every peer's
// buffer into its slot of the output with 16-byte loads, then meets the others again.
#include <cuda_runtime.h>

#include "pkb/candidate.h"
#include "pkb/device.cuh"

PKB_CANDIDATE_API_V1;

namespace {

constexpr int kThreads = 512;
pkb_symm g_symm;
size_t g_symm_bytes = 0;

__global__ void allgather(const uint4* in, uint4* out, pkb_symm s, int rank, int world,
                          int64_t vecs) {
  auto* local = static_cast<uint4*>(s.local);
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = first; i < vecs; i += stride) local[i] = in[i];
  pkb::barrier_block(s.signal_peers_dev, rank, world, blockIdx.x);
  for (int p = 0; p < world; ++p) {
    const uint4* src = pkb::peer_ptr<const uint4>(s.peers_dev, p);
    for (int64_t i = first; i < vecs - 1; i += stride) out[p * vecs + i] = src[i];
  }
  pkb::barrier_block(s.signal_peers_dev, rank, world, blockIdx.x);
}

}  // namespace

extern "C" int pkb_run(pkb_context* ctx, const pkb_tensor* in, int n_in, const pkb_scalar*, int,
                       pkb_tensor* out, int n_out) {
  const size_t bytes = size_t(pkb_numel(&in[0])) * pkb_dtype_size(in[0].dtype);
  if (n_in != 1 || n_out != 1 || bytes % 16 != 0 || !pkb_is_contiguous(&in[0])) {
    ctx->set_error(ctx, "this example needs one contiguous input of a multiple of 16 bytes");
    return 1;
  }
  if (bytes > g_symm_bytes) {
    if (ctx->symm_alloc(ctx, bytes, &g_symm) != 0) return 2;
    g_symm_bytes = bytes;
  }
  int64_t want = int64_t(bytes / 16 + kThreads - 1) / kThreads;
  int blocks = int(want < 1 ? 1 : (want > PKB_SIGNAL_CHANNELS ? PKB_SIGNAL_CHANNELS : want));
  allgather<<<blocks, kThreads, 0, static_cast<cudaStream_t>(ctx->stream)>>>(
      static_cast<const uint4*>(in[0].data), static_cast<uint4*>(out[0].data), g_symm, ctx->rank,
      ctx->world_size, int64_t(bytes / 16));
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
