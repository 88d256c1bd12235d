// The watch kernel (gpu_watch.h): one thread reading the GPU's clock until the judge says stop.
#include <cuda_runtime.h>

#include "worker/engine/gpu_watch.h"

namespace pkb {
namespace {

__device__ __forceinline__ unsigned long long GlobalTimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void Watch(GpuWatchSlots* slots, unsigned long long limit_ns) {
  volatile GpuWatchSlots* s = slots;
  const unsigned long long first = GlobalTimer();
  unsigned long long last = first, longest = 0;
  s->first = first;
  __threadfence_system();
  s->started = 1;
  __threadfence_system();
  while (s->stop == 0) {
    const unsigned long long now = GlobalTimer();
    if (now - last > longest) longest = now - last;
    last = now;
    if (now - first > limit_ns) break;
  }
  s->last = last;
  s->longest_gap = longest;
  __threadfence_system();
}

}  // namespace

int LoadGpuWatch() {
  cudaFuncAttributes attributes;
  return static_cast<int>(cudaFuncGetAttributes(&attributes, Watch));
}

int LaunchGpuWatch(void* stream, GpuWatchSlots* slots, unsigned long long limit_ns) {
  Watch<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(slots, limit_ns);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace pkb
