// The profile pass (profile.proto): after the timed window, one call of the candidate (in its
// host) and one of the reference (in the judge) run again with the GPU's activity recorded by
// CUPTI's activity API: every kernel, copy and memset with its times and launch shape. Never
// timed, never part of a verdict.
//
// CUPTI is loaded at run time (dlopen of libcupti.so.13, also beside the CUDA runtime in use), so
// the binaries run where it is missing; the profile's note then says so.
#ifndef PKB_WORKER_ENGINE_PROFILER_H_
#define PKB_WORKER_ENGINE_PROFILER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pkb/v1/profile.pb.h"
#include "pkb/v1/result.pb.h"

namespace pkb {

// Records kept per call; the rest are counted in CallProfile.dropped.
inline constexpr int kMaxProfileRecords = 512;

// What copies and memsets are called in a profile: a fixed list, so the names say nothing of the
// source (the public view keeps these and replaces any other).
enum class Transfer {
  kHostToDevice,
  kDeviceToHost,
  kDeviceToDevice,
  kPeerToPeer,
  kHostToHost,
  kOtherCopy,
  kMemset
};
const char* TransferName(Transfer t);
bool IsTransferName(const std::string& name);

// One activity record as collected, on the GPU's clock (ns).
struct RawActivity {
  v1::ProfileRecord::Kind kind = v1::ProfileRecord::KERNEL;
  std::string name;
  uint64_t start_ns = 0, end_ns = 0;
  int32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
  int64_t bytes = 0;
  uint32_t stream = 0;
  int32_t registers_per_thread = 0, shared_memory_bytes = 0;
};

// The profile of one call from its records, in any order: sorted by start, times from the first
// start, the span, the busy time (the union of the records' intervals), the bytes copied and set,
// at most kMaxProfileRecords records (the first by start; `lost` plus the rest are `dropped`).
v1::CallProfile SummarizeActivity(std::vector<RawActivity> records, int64_t lost);

// Runs `body` (which enqueues the call's work) and `sync` (which waits for the device) with the
// GPU's activity recorded, and returns its profile. A failure of body or sync is returned as such;
// a profile that cannot be taken (no CUPTI, CUPTI refuses) comes back with its note set.
absl::StatusOr<v1::CallProfile> ProfileCall(const std::function<absl::Status()>& body,
                                            const std::function<absl::Status()>& sync);

// The profiles of a result as text, for pkb-eval's report and `pkb submit`: rank 0's calls record
// by record (at most `records` each), one line for each other rank, and the roofline's bytes over
// the candidate's span (the effective bandwidth). Empty when the result has no profile.
std::string ProfileText(const v1::EvalResult& r, int records = 24);

}  // namespace pkb

#endif  // PKB_WORKER_ENGINE_PROFILER_H_
