// How the host's speed moves over time on a GPU node (issue 20): a time series, about one sample
// per millisecond, of three host-bound figures taken in one process:
//   cpu     a fixed chain of integer work (the core's clock, nothing of the GPU);
//   launch  empty kernels launched back to back on one stream (the launch path: driver + doorbell);
//   marked  the harness's timed loop shape: an event, a launch, an event, per call.
// Then, for each figure: its quantiles, its correlation with `cpu`, and the spread of its means
// over windows of 1, 10, 100 and 1000 ms (how long a window must be for its mean to stay within
// ±5 %). The series goes to a CSV for plots.
//   drift [seconds=20] [csv=drift.csv] [brief]
// With `brief`, one line: each figure's median (for comparing many short processes).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

__global__ void empty_kernel() {}

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

#define CHECK(x)                                                      \
  do {                                                                \
    cudaError_t err_ = (x);                                           \
    if (err_ != cudaSuccess) {                                        \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(err_)); \
      std::exit(1);                                                   \
    }                                                                 \
  } while (0)

struct Sample {
  double t_ms, cpu_us, launch_us, marked_us;
};

double Quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * (v.size() - 1))];
}

double Correlation(const std::vector<double>& a, const std::vector<double>& b) {
  double ma = 0, mb = 0;
  for (size_t i = 0; i < a.size(); ++i) ma += a[i], mb += b[i];
  ma /= a.size();
  mb /= b.size();
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    sab += (a[i] - ma) * (b[i] - mb);
    saa += (a[i] - ma) * (a[i] - ma);
    sbb += (b[i] - mb) * (b[i] - mb);
  }
  return sab / std::sqrt(saa * sbb);
}

// Means of `v` over consecutive windows of `ms` (by the samples' times); p5 and p95 of those means
// against their median.
void WindowSpread(const char* name, const std::vector<Sample>& s, const std::vector<double>& v,
                  double ms) {
  std::vector<double> means;
  double sum = 0, start = s[0].t_ms;
  int count = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i].t_ms - start >= ms && count > 0) {
      means.push_back(sum / count);
      sum = 0, count = 0, start = s[i].t_ms;
    }
    sum += v[i], ++count;
  }
  if (means.size() < 5) return;
  const double m = Quantile(means, 0.5);
  std::printf(
      "  %-7s windows of %6.0f ms (%5zu): median %8.3f us, p5 %+6.1f%%, p95 %+6.1f%%, "
      "min %+6.1f%%, max %+6.1f%%\n",
      name, ms, means.size(), m, 100 * (Quantile(means, 0.05) / m - 1),
      100 * (Quantile(means, 0.95) / m - 1),
      100 * (*std::min_element(means.begin(), means.end()) / m - 1),
      100 * (*std::max_element(means.begin(), means.end()) / m - 1));
}

}  // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 20;
  const char* csv = argc > 2 ? argv[2] : "drift.csv";
  constexpr int kCalls = 32;
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::vector<cudaEvent_t> events(2 * kCalls);
  for (auto& e : events) CHECK(cudaEventCreate(&e));
  for (int i = 0; i < 1000; ++i) empty_kernel<<<1, 32, 0, stream>>>();
  CHECK(cudaStreamSynchronize(stream));

  std::vector<Sample> samples;
  volatile uint64_t sink = 0;
  const auto begin = Clock::now();
  while (Since(begin) < seconds * 1e6) {
    Sample s;
    s.t_ms = Since(begin) / 1e3;
    auto t0 = Clock::now();
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < 20000; ++i) x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    sink = sink + x;
    s.cpu_us = Since(t0);
    t0 = Clock::now();
    for (int i = 0; i < kCalls; ++i) empty_kernel<<<1, 32, 0, stream>>>();
    CHECK(cudaStreamSynchronize(stream));
    s.launch_us = Since(t0) / kCalls;
    t0 = Clock::now();
    for (int i = 0; i < kCalls; ++i) {
      CHECK(cudaEventRecord(events[2 * i], stream));
      empty_kernel<<<1, 32, 0, stream>>>();
      CHECK(cudaEventRecord(events[2 * i + 1], stream));
    }
    CHECK(cudaStreamSynchronize(stream));
    s.marked_us = Since(t0) / kCalls;
    samples.push_back(s);
  }

  if (FILE* f = std::fopen(csv, "w")) {
    std::fprintf(f, "t_ms,cpu_us,launch_us,marked_us\n");
    for (const auto& s : samples) {
      std::fprintf(f, "%.3f,%.3f,%.3f,%.3f\n", s.t_ms, s.cpu_us, s.launch_us, s.marked_us);
    }
    std::fclose(f);
  }
  std::vector<double> cpu, launch, marked;
  for (const auto& s : samples) {
    cpu.push_back(s.cpu_us), launch.push_back(s.launch_us), marked.push_back(s.marked_us);
  }
  if (argc > 3 && std::string(argv[3]) == "brief") {
    std::printf("medians over %zu samples: cpu %8.3f us, launch %7.3f us, marked %7.3f us\n",
                samples.size(), Quantile(cpu, 0.5), Quantile(launch, 0.5), Quantile(marked, 0.5));
    return 0;
  }
  std::printf("%zu samples over %.1f s\n", samples.size(), seconds);
  const struct {
    const char* name;
    const std::vector<double>* v;
  } series[] = {{"cpu", &cpu}, {"launch", &launch}, {"marked", &marked}};
  for (const auto& k : series) {
    std::printf(
        "%-7s p1 %8.3f p5 %8.3f p50 %8.3f p95 %8.3f p99 %8.3f us; correlation with cpu %+.2f\n",
        k.name, Quantile(*k.v, 0.01), Quantile(*k.v, 0.05), Quantile(*k.v, 0.5),
        Quantile(*k.v, 0.95), Quantile(*k.v, 0.99), Correlation(*k.v, cpu));
    for (double ms : {1.0, 10.0, 100.0, 1000.0}) WindowSpread(k.name, samples, *k.v, ms);
  }
  return 0;
}
