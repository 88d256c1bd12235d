// The judge's checks that its GPU is its own while anything is timed: the watch's readings
// (gpu_watch.h: NoteWatch, LogWatch, the control WatchAlone) and the driver's process list
// (GpuNotAlone). Judge::TimeRound and Benchmark (judge_benchmark.cc) call them.
#include <algorithm>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "worker/engine/gpu_watch.h"
#include "worker/engine/judge_runner.h"

namespace pkb {

absl::StatusOr<GpuWatchReading> Judge::WatchAlone(absl::Duration span) {
  PKB_RETURN_IF_ERROR(dev_->Synchronize());
  PKB_RETURN_IF_ERROR(dev_->StartWatch());
  absl::SleepFor(span);
  PKB_ASSIGN_OR_RETURN(GpuWatchReading r, dev_->StopWatch());
  std::fprintf(stderr,
               "pkb-rank %d: GPU watch alone for %.0f us: start %.1f us, longest gap %.1f us, "
               "%.1f us in all\n",
               comm_->rank(), r.ran_us, r.start_us, r.longest_gap_us, r.gap_sum_us);
  return r;
}

void Judge::NoteWatch(const GpuWatchReading& r, const std::string& when, double peer_wait_us) {
  if (watch_.count++ == 0) watch_.first_start_us = r.start_us;
  watch_.start_us = std::max(watch_.start_us, r.start_us);
  watch_.longest_gap_us = std::max(watch_.longest_gap_us, r.longest_gap_us);
  watch_.gap_sum_us = std::max(watch_.gap_sum_us, r.gap_sum_us);
  watch_.ran_us += r.ran_us;
  if (watch_finding_.empty()) watch_finding_ = GpuWatchFinding(r, when);
  std::string stall = GpuWatchStall(r, when);
  if (stall.empty()) return;
  if (peer_wait_us >= r.ran_us / 2) {
    // Not this judge's stall: most of the watch went waiting for other ranks' hosts to answer,
    // which the submission decides.
    if (watch_finding_.empty()) {
      watch_finding_ = absl::StrFormat(
          "%s, the judge's GPU watch ran out its limit (%.0f us) while this rank waited %.0f us "
          "for the other ranks' hosts to answer",
          when, r.ran_us, peer_wait_us);
    }
    return;
  }
  if (watch_stall_.empty()) watch_stall_ = std::move(stall);
}

void Judge::LogWatch() const {
  if (watch_.count == 0) return;
  std::fprintf(stderr,
               "pkb-rank %d: GPU watch while the host was stopped: %d watches over %.0f us, "
               "first start %.1f us, latest start %.1f us (limit %.0f), longest gap %.1f us, "
               "most gaps in one watch %.1f us (limit %.0f each)\n",
               comm_->rank(), watch_.count, watch_.ran_us, watch_.first_start_us, watch_.start_us,
               kWatchStartLimitUs, watch_.longest_gap_us, watch_.gap_sum_us, kWatchGapLimitUs);
}

// Waits up to `limit` for at most `expected` processes with a compute context on this rank's
// GPU (its judge, and its host while that runs); "" then, or when the driver cannot say (logged),
// else what was seen, for the verdict.
std::string Judge::GpuNotAlone(int expected, absl::Duration limit, const char* timing) {
  absl::Time end = absl::Now() + limit;
  for (;;) {
    absl::StatusOr<int> n = dev_->ComputeProcesses();
    if (!n.ok()) {
      if (dev_->device_type() == PKB_CUDA)
        std::fprintf(stderr, "pkb-rank %d: cannot check the GPU's processes: %s\n", comm_->rank(),
                     std::string(n.status().message()).c_str());
      return "";
    }
    if (*n <= expected) {
      std::fprintf(stderr,
                   "pkb-rank %d: %d process(es) hold a compute context on this GPU (%d allowed) "
                   "before %s is timed\n",
                   comm_->rank(), *n, expected, timing);
      return "";
    }
    if (absl::Now() > end) {
      return absl::StrCat(*n, " processes held a compute context on this rank's GPU while ", timing,
                          " was timed (", expected, " expected: another job's, or one ",
                          "the submission left)");
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

}  // namespace pkb
