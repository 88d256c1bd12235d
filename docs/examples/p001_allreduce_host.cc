// Problem 1 (all-reduce, bf16) as a host-only C++ candidate (`language: "cpp"`): what a machine
// without a GPU can evaluate end to end, with a full verdict and timings. It implements the same
// C ABI as GPU candidates; its "interconnect" is the harness's symmetric memory (on CPU, host
// memory shared by the rank processes) and host barrier, as GPU candidates use theirs.
// scripts/run-local.sh submits it on GPU-less machines (docs/candidate-api.md: Host-only C++
// candidates). Expected verdict: OK (on CPU it is slower than the reference: no speedup).
#include <stdint.h>
#include <string.h>

#include "pkb/candidate.h"

PKB_CANDIDATE_API_V1;

namespace {

float Bf16ToFloat(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

uint16_t FloatToBf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7FFF + ((u >> 16) & 1);  // round to nearest even (the inputs are finite)
  return uint16_t(u >> 16);
}

}  // namespace

extern "C" int pkb_run(pkb_context* ctx, const pkb_tensor* in, int, const pkb_scalar*, int,
                       pkb_tensor* out, int) {
  const int64_t n = pkb_numel(&in[0]);
  // A symmetric buffer, allocated on the first call (pkb_init sees no shapes) and grown on
  // demand: the allocation is collective, every rank asks for the same sizes in the same order.
  static pkb_symm symm;
  static size_t have = 0;
  const size_t bytes = size_t(n) * sizeof(float);
  if (have < bytes) {
    if (ctx->symm_alloc(ctx, bytes, &symm) != 0) return 1;
    have = bytes;
  }
  const auto* x = static_cast<const uint16_t*>(in[0].data);
  auto* y = static_cast<uint16_t*>(out[0].data);
  float* mine = static_cast<float*>(symm.local);
  for (int64_t i = 0; i < n; ++i) mine[i] = Bf16ToFloat(x[i]);
  if (ctx->host_barrier(ctx) != 0) return 1;
  for (int64_t i = 0; i < n; ++i) {
    float sum = 0;  // fp32, in rank order
    for (int p = 0; p < ctx->world_size; ++p) sum += static_cast<const float*>(symm.peers[p])[i];
    y[i] = FloatToBf16(sum);
  }
  // Nobody overwrites its buffer before every rank has read it.
  return ctx->host_barrier(ctx);
}
