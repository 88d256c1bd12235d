// An experiment for the judge's GPU watch (issue 20): does a kernel of the judge's, spinning on
// %globaltimer, see the GPU taken from it when another process's context has work? Modes:
//   watch MS [--copy]  the watch for MS ms (with --copy, this process's own copies beside it on
//                      another stream, as the judge's fills are): start latency, longest gap
//   busy MS            every SM spinning for MS ms (a persistent kernel left running)
//   sleepy MS          one thread in __nanosleep for MS ms (a kernel that waits, mostly idle)
//   copy MS            device-to-device copies for MS ms (copy engines only)
//   idle MS            a context and no work for MS ms
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#define CK(x)                                                                    \
  do {                                                                           \
    cudaError_t e = (x);                                                         \
    if (e != cudaSuccess) {                                                      \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e));               \
      std::exit(1);                                                              \
    }                                                                            \
  } while (0)

__device__ __forceinline__ unsigned long long Now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

struct Reading {
  unsigned long long first, last, max_gap, gaps_20us, gaps_200us, gap_ns_20us, loops;
};

__global__ void Watch(volatile int* started, volatile int* stop, Reading* out) {
  unsigned long long first = Now(), prev = first, max_gap = 0, g20 = 0, g200 = 0, sum = 0, n = 0;
  *started = 1;
  __threadfence_system();
  while (*stop == 0) {
    unsigned long long t = Now(), gap = t - prev;
    if (gap > max_gap) max_gap = gap;
    if (gap > 20000) { ++g20; sum += gap; }
    if (gap > 200000) ++g200;
    prev = t;
    ++n;
  }
  *out = Reading{first, prev, max_gap, g20, g200, sum, n};
}

__global__ void Busy(unsigned long long until) {
  while (Now() < until) {
  }
}

__global__ void Sleepy(unsigned long long until) {
  while (Now() < until) __nanosleep(1000);
}

__global__ void Stamp(unsigned long long* t) { *t = Now(); }

unsigned long long GpuNow() {
  unsigned long long* d;
  unsigned long long h;
  CK(cudaMalloc(&d, 8));
  Stamp<<<1, 1>>>(d);
  CK(cudaMemcpy(&h, d, 8, cudaMemcpyDeviceToHost));
  CK(cudaFree(d));
  return h;
}

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const char* mode = argv[1];
  const double ms = std::atof(argv[2]);
  const bool copy = argc > 3 && !std::strcmp(argv[3], "--copy");
  CK(cudaFree(nullptr));
  using Clock = std::chrono::steady_clock;
  if (!std::strcmp(mode, "watch")) {
    int *started, *stop;
    CK(cudaHostAlloc(&started, 4, cudaHostAllocMapped));
    CK(cudaHostAlloc(&stop, 4, cudaHostAllocMapped));
    *started = 0;
    *stop = 0;
    Reading* out;
    CK(cudaMallocManaged(&out, sizeof(Reading)));
    cudaStream_t s, work;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&work, cudaStreamNonBlocking));
    void *a = nullptr, *b = nullptr;
    const size_t bytes = size_t(256) << 20;
    if (copy) {
      CK(cudaMalloc(&a, bytes));
      CK(cudaMalloc(&b, bytes));
    }
    auto t0 = Clock::now();
    Watch<<<1, 1, 0, s>>>(started, stop, out);
    while (*(volatile int*)started == 0) {
    }
    const double start_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    int copies = 0;
    while (std::chrono::duration<double, std::milli>(Clock::now() - t0).count() < ms) {
      if (copy) {
        CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, work));
        CK(cudaMemsetAsync(a, copies & 0xff, bytes, work));
        CK(cudaStreamSynchronize(work));
        ++copies;
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    }
    *(volatile int*)stop = 1;
    CK(cudaStreamSynchronize(s));
    std::printf(
        "watch %.0f ms%s: start %.1f us, ran %.2f ms, longest gap %.1f us, gaps >20us %llu "
        "(%.2f ms in all), >200us %llu, %llu loops, %d copies\n",
        ms, copy ? " --copy" : "", start_us, (out->last - out->first) / 1e6, out->max_gap / 1e3,
        out->gaps_20us, out->gap_ns_20us / 1e6, out->gaps_200us, out->loops, copies);
    return 0;
  }
  const unsigned long long until = GpuNow() + static_cast<unsigned long long>(ms * 1e6);
  if (!std::strcmp(mode, "busy")) {
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    Busy<<<sms * 2, 256>>>(until);
  } else if (!std::strcmp(mode, "sleepy")) {
    Sleepy<<<1, 1>>>(until);
  } else if (!std::strcmp(mode, "copy")) {
    void *a, *b;
    const size_t bytes = size_t(256) << 20;
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&b, bytes));
    auto t0 = Clock::now();
    while (std::chrono::duration<double, std::milli>(Clock::now() - t0).count() < ms)
      CK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
  } else if (!std::strcmp(mode, "idle")) {
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
  } else {
    return 2;
  }
  CK(cudaDeviceSynchronize());
  std::printf("%s %.0f ms done\n", mode, ms);
  return 0;
}
