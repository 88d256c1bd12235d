// Problem 13, SUBTLY WRONG on purpose (a test fixture): the reduction loop wraps once too far and
// counts the local partial twice. MISMATCH expected.
// (P = A·B rounded to bf16, as the reference does); a one-shot all-reduce over symmetric memory
// then sums the W partials in fp32 and rounds once. That order differs from NCCL's bf16 ring at
// W >= 4, which the problem's tolerance accepts (see its statement).
#include <ATen/ops/matmul.h>  // at::matmul_out (pkb/aten_core.h has no ops)
#include <cuda_bf16.h>

#include "pkb/aten_core.h"
#include "pkb/candidate.h"
#include "pkb/device.cuh"

PKB_CANDIDATE_API_V1;

namespace {

constexpr int kBlocks = 32;
constexpr int kThreads = 512;
pkb_symm g_symm;
size_t g_symm_bytes = 0;

__global__ void sum_partials(__nv_bfloat16* out, pkb_symm s, int rank, int world, int64_t n) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
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
  if (n_in != 2 || n_out != 1 || out[0].dtype != PKB_BFLOAT16) {
    ctx->set_error(ctx, "expected (A_local, B_local) -> C in bf16");
    return 1;
  }
  const int64_t n = pkb_numel(&out[0]);
  const size_t bytes = size_t(n) * sizeof(__nv_bfloat16);
  if (bytes > g_symm_bytes) {
    if (ctx->symm_alloc(ctx, bytes, &g_symm) != 0) return 2;
    g_symm_bytes = bytes;
  }
  auto guard = pkb::use_stream(ctx);
  at::Tensor a = pkb::as_tensor(in[0]), b = pkb::as_tensor(in[1]);
  at::Tensor partial = at::from_blob(g_symm.local, {out[0].shape[0], out[0].shape[1]},
                                     a.options());
  at::matmul_out(partial, a, b);  // the partial lands in this rank's symmetric buffer
  sum_partials<<<kBlocks, kThreads, 0, static_cast<cudaStream_t>(ctx->stream)>>>(
      static_cast<__nv_bfloat16*>(out[0].data), g_symm, ctx->rank, ctx->world_size, n);
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
