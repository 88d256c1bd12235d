// Shared by the CPU test candidates: bf16 <-> float on the host, and the all-reduce they use as
// their "interconnect": the harness's symmetric memory (on CPU, host memory shared by the
// candidate's rank processes) and host barrier, as GPU candidates use theirs. CPU candidates are
// test vehicles for the engine's verify, timing and failure paths on machines without a GPU; they
// implement the same C ABI as GPU candidates.
#pragma once
#include <stdint.h>
#include <string.h>

#include <vector>

#include "pkb/candidate.h"

inline float bf16_to_float(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7FFF + ((u >> 16) & 1);  // round to nearest even (inputs here are finite)
  return uint16_t(u >> 16);
}

// A symmetric buffer of at least `bytes` (slot 0 for data, 1 for flags), grown on demand: the
// allocation is collective, and every rank asks for the same sizes in the same order.
inline pkb_symm* cpu_exchange(pkb_context* ctx, int slot, size_t bytes) {
  static pkb_symm symm[2];
  static size_t have[2];
  if (have[slot] < bytes) {
    if (ctx->symm_alloc(ctx, bytes, &symm[slot]) != 0) return nullptr;
    have[slot] = bytes;
  }
  return &symm[slot];
}

// out = sum over ranks of in (bf16, fp32 accumulation in rank order), through the harness's
// symmetric memory and host barrier. Returns nonzero on failure, like pkb_run.
inline int allreduce_bf16(pkb_context* ctx, const uint16_t* in, uint16_t* out, int64_t n,
                          bool count_self_twice) {
  pkb_symm* s = cpu_exchange(ctx, 0, size_t(n) * sizeof(float));
  if (!s) return 1;
  float* mine = static_cast<float*>(s->local);
  for (int64_t i = 0; i < n; ++i) mine[i] = bf16_to_float(in[i]);
  if (ctx->host_barrier(ctx) != 0) return 1;
  for (int64_t i = 0; i < n; ++i) {
    float acc = 0;
    for (int p = 0; p < ctx->world_size; ++p) acc += static_cast<const float*>(s->peers[p])[i];
    out[i] = float_to_bf16(acc + (count_self_twice ? bf16_to_float(in[i]) : 0.f));
  }
  // Nobody overwrites its buffer before every rank has read it.
  return ctx->host_barrier(ctx);
}

// The largest of one int per rank, in *result; nonzero on failure.
inline int max_over_ranks(pkb_context* ctx, int value, int* result) {
  pkb_symm* s = cpu_exchange(ctx, 1, sizeof(int));
  if (!s) return 1;
  *static_cast<int*>(s->local) = value;
  if (ctx->host_barrier(ctx) != 0) return 1;
  *result = value;
  for (int p = 0; p < ctx->world_size; ++p) {
    int v = *static_cast<const int*>(s->peers[p]);
    if (v > *result) *result = v;
  }
  return ctx->host_barrier(ctx);
}
