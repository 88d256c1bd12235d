// The byte moves' kernel (byte_moves.h): blocks take pieces in turn; a piece's threads move 16
// bytes at a time where its addresses allow, single bytes for the rest.
#include <cuda_runtime.h>

#include <algorithm>

#include "worker/engine/byte_moves.h"

namespace pkb {
namespace {

__global__ void Moves(const PackedMove* moves, int count) {
  for (int m = blockIdx.x; m < count; m += gridDim.x) {
    const PackedMove p = moves[m];
    auto* dst = reinterpret_cast<unsigned char*>(p.dst);
    const auto* src = reinterpret_cast<const unsigned char*>(p.src);
    const bool wide = ((p.dst | p.src) & 15) == 0;
    const unsigned long long n16 = wide ? p.bytes / 16 : 0;
    if (src != nullptr) {
      for (unsigned long long i = threadIdx.x; i < n16; i += blockDim.x)
        reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
      for (unsigned long long i = n16 * 16 + threadIdx.x; i < p.bytes; i += blockDim.x)
        dst[i] = src[i];
    } else {
      uint4 v;
      v.x = static_cast<unsigned int>(p.pattern[0]);
      v.y = static_cast<unsigned int>(p.pattern[0] >> 32);
      v.z = static_cast<unsigned int>(p.pattern[1]);
      v.w = static_cast<unsigned int>(p.pattern[1] >> 32);
      for (unsigned long long i = threadIdx.x; i < n16; i += blockDim.x)
        reinterpret_cast<uint4*>(dst)[i] = v;
      for (unsigned long long i = n16 * 16 + threadIdx.x; i < p.bytes; i += blockDim.x)
        dst[i] = static_cast<unsigned char>(p.pattern[(i % 16) / 8] >> (8 * (i % 8)));
    }
  }
}

}  // namespace

int LoadByteMoves() {
  cudaFuncAttributes attributes;
  return static_cast<int>(cudaFuncGetAttributes(&attributes, Moves));
}

int LaunchByteMoves(void* stream, const PackedMove* device_list, int count) {
  if (count <= 0) return static_cast<int>(cudaSuccess);
  const int blocks = std::min(count, 4096);
  void* args[] = {&device_list, &count};
  return static_cast<int>(cudaLaunchKernel(reinterpret_cast<const void*>(&Moves), dim3(blocks),
                                           dim3(256), args, 0, static_cast<cudaStream_t>(stream)));
}

}  // namespace pkb
