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
  unsigned long long last = first, longest = 0, sum = 0;
  unsigned int expired = 0;
  s->first = first;
  __threadfence_system();
  s->started = 1;
  __threadfence_system();
  for (;;) {
    // One more reading after the stop is seen: a gap just before it counts too.
    const bool stopping = s->stop != 0;
    const unsigned long long now = GlobalTimer();
    const unsigned long long gap = now - last;
    if (gap > longest) longest = gap;
    if (gap > kWatchSmallGapNs) sum += gap;
    last = now;
    if (stopping) break;
    if (now - first > limit_ns) {
      expired = 1;
      break;
    }
  }
  s->last = last;
  s->longest_gap = longest;
  s->gap_sum = sum;
  s->expired = expired;
  __threadfence_system();
}

}  // namespace

int LoadGpuWatch() {
  cudaFuncAttributes attributes;
  return static_cast<int>(cudaFuncGetAttributes(&attributes, Watch));
}

int LaunchGpuWatch(void* stream, GpuWatchSlots* slots, unsigned long long limit_ns) {
  // The launch's own error (an earlier call's is not this one's to report or to clear).
  void* args[] = {&slots, &limit_ns};
  return static_cast<int>(cudaLaunchKernel(reinterpret_cast<const void*>(&Watch), dim3(1), dim3(1),
                                           args, 0, static_cast<cudaStream_t>(stream)));
}

}  // namespace pkb
