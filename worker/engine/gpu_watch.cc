#include "worker/engine/gpu_watch.h"

#include "absl/strings/str_format.h"

namespace pkb {

namespace {

bool WithinLimits(const GpuWatchReading& r) {
  return r.start_us <= kWatchStartLimitUs && r.longest_gap_us <= kWatchGapLimitUs &&
         r.gap_sum_us <= kWatchGapLimitUs;
}

}  // namespace

std::string GpuWatchStall(const GpuWatchReading& r, const std::string& when) {
  if (!r.expired || !WithinLimits(r)) return "";
  return absl::StrFormat(
      "%s, the judge's GPU watch was never stopped and ran out its own limit (%.0f us) with "
      "nothing else seen on the GPU (start %.0f us, longest gap %.0f us): the judge's own work "
      "waited on the whole device",
      when, r.ran_us, r.start_us, r.longest_gap_us);
}

std::string GpuWatchFinding(const GpuWatchReading& r, const std::string& when) {
  if (WithinLimits(r)) return "";  // and if it ran out its limit, GpuWatchStall says why
  return absl::StrFormat(
      "%s, a kernel of the judge's on the GPU started %.0f us after its launch (at most %.0f with "
      "nothing else there) and was kept off the GPU for up to %.0f us at a time, %.0f us in all "
      "(at most %.0f either) over %.0f us",
      when, r.start_us, kWatchStartLimitUs, r.longest_gap_us, r.gap_sum_us, kWatchGapLimitUs,
      r.ran_us);
}

}  // namespace pkb
