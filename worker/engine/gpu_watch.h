// The judge's watch over its GPU while the candidate's host is stopped (Judge::TimeRound): a
// kernel of the judge's, one thread reading the GPU's clock (%globaltimer) in a loop until the
// judge stops it. Contexts of different processes take turns on a GPU (time slices; a judged GPU
// runs no MPS), so while the watch runs, any work of another context (the host's: a kernel left
// running past its answer, work queued to start once its inputs land) keeps the watch off the GPU
// for a while: it starts late, or two of its readings in a row lie far apart. The judge's own work
// runs beside it (one context: no turns).
#ifndef PKB_WORKER_ENGINE_GPU_WATCH_H_
#define PKB_WORKER_ENGINE_GPU_WATCH_H_

#include <string>

namespace pkb {

struct GpuWatchReading {
  // From its launch to its first reading, on the judge's thread's CPU clock (the judge spins for
  // it): time the CPU took the thread away is not the GPU's.
  double start_us = 0;
  double ran_us = 0;          // from its first reading to its last, on the GPU's clock
  double longest_gap_us = 0;  // the longest time between two of its readings in a row
  double gap_sum_us = 0;      // every gap over kWatchSmallGapNs, added up
  bool expired = false;       // it ended by itself (its limit), not by the judge's stop
};

// What a watch may show with nothing but the judge on the GPU, in microseconds. Measured on an
// H100 (docs/benchmarks.md, "The judge's GPU watch"): alone, beside an idle context, or beside the
// judge's own copies, its readings lie 2-7 us apart and a loaded watch starts in about 20 us;
// beside another context with work (kernels, sleeping kernels, or copies alone), it starts
// 3.5-4 ms late and the GPU's time slices keep it off 2.4 ms at a time.
inline constexpr double kWatchStartLimitUs = 500;
inline constexpr double kWatchGapLimitUs = 200;
// How long the judge watches its GPU alone once the host is gone (the control: a gap then is
// another context's, not the submission's), in milliseconds: a few of the GPU's time slices.
inline constexpr double kWatchAloneMs = 10;
// ... and where a watch saw work while the host was stopped, before the submission is blamed for
// it: another context's occasional work must have had its chance to show.
inline constexpr double kWatchAloneBlamingMs = 100;

// "" where the reading is within the limits (start, longest gap, and the gaps added up), else what
// was seen `when` ("while round 2's inputs were copied in"), for the verdict.
std::string GpuWatchFinding(const GpuWatchReading& reading, const std::string& when);
// "" unless the watch ran out its own limit with its start and gaps within the limits: then
// nothing else ran on the GPU (another context takes turns, and would show as gaps), and the
// judge itself never stopped it: its own work waited on the whole device, the watch included.
// What happened `when`, for an INTERNAL verdict (nobody's submission is blamed).
std::string GpuWatchStall(const GpuWatchReading& reading, const std::string& when);

// The watch kernel's memory: host memory mapped into the device, written by both sides.
struct GpuWatchSlots {
  unsigned int started;  // the kernel's: set at its first reading
  unsigned int stop;     // the judge's: set to end it
  unsigned int expired;  // the kernel's: it ran out its limit, unstopped
  unsigned long long first, last, longest_gap, gap_sum;  // its readings, in nanoseconds
};
// Gaps longer than this (in nanoseconds) are added up (GpuWatchReading::gap_sum_us): many pieces of
// another context's work, each too short for kWatchGapLimitUs, still show. With nothing else on
// the GPU there were none (7 us at most beside the judge's own copies).
inline constexpr unsigned long long kWatchSmallGapNs = 20000;

// (gpu_watch_kernel.cu, CUDA builds only.) Enqueues the watch on `stream` (a cudaStream_t), with
// `slots` the device's address of its mapped memory. The watch ends when `stop` is set, or by
// itself after `limit_ns` (a judge that never stops it cannot hang its device). The CUDA error
// of the launch (0: none).
int LaunchGpuWatch(void* stream, GpuWatchSlots* slots, unsigned long long limit_ns);
// (CUDA builds only.) Loads the watch's code onto the device (the CUDA runtime loads a kernel at
// its first launch otherwise: a few hundred microseconds that are not a start's to count). The
// CUDA error (0: none).
int LoadGpuWatch();

}  // namespace pkb

#endif  // PKB_WORKER_ENGINE_GPU_WATCH_H_
