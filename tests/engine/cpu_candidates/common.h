// Shared by the CPU test candidates: bf16 <-> float on the host, and the MPI all-reduce they
// use as their "interconnect". CPU candidates are test vehicles for the engine's verify, timing
// and failure paths on machines without a GPU; they implement the same C ABI as GPU candidates.
#pragma once
#include <mpi.h>
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

// out = sum over ranks of in (bf16, fp32 accumulation), through MPI.
inline void allreduce_bf16(const uint16_t* in, uint16_t* out, int64_t n, bool count_self_twice) {
  std::vector<float> buf(n);
  for (int64_t i = 0; i < n; ++i) buf[i] = bf16_to_float(in[i]);
  MPI_Allreduce(MPI_IN_PLACE, buf.data(), int(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  for (int64_t i = 0; i < n; ++i) {
    out[i] = float_to_bf16(buf[i] + (count_self_twice ? bf16_to_float(in[i]) : 0.f));
  }
}
