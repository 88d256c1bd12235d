#include "worker/engine/gpu_watch.h"

#include "absl/strings/str_format.h"

namespace pkb {

std::string GpuWatchFinding(const GpuWatchReading& r, const std::string& when) {
  if (r.expired) {
    return absl::StrFormat(
        "%s, a kernel of the judge's watching the GPU ran out its limit (%.0f us)", when, r.ran_us);
  }
  if (r.start_us <= kWatchStartLimitUs && r.longest_gap_us <= kWatchGapLimitUs &&
      r.gap_sum_us <= kWatchGapLimitUs)
    return "";
  return absl::StrFormat(
      "%s, a kernel of the judge's on the GPU started %.0f us after its launch (at most %.0f with "
      "nothing else there) and was kept off the GPU for up to %.0f us at a time, %.0f us in all "
      "(at most %.0f either) over %.0f us",
      when, r.start_us, kWatchStartLimitUs, r.longest_gap_us, r.gap_sum_us, kWatchGapLimitUs,
      r.ran_us);
}

}  // namespace pkb
