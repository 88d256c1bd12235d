// The reference's time on this node, kept across jobs.
//
// The eager reference is host-bound, and its time moves by tens of percent between processes on
// one node (bimodal on the H200: docs/benchmarks.md), far more than within one. So the baseline a
// speedup is computed against is a property of (problem and version, W, M, N, dtype, timed
// iterations, GPU model, harness version) on this node: the median of its newest measurements,
// each job adding its own. The job's own measurement stays in the result beside it, as a drift
// check.
//
//   BaselineStore store(cache_dir + "/baselines");
//   PKB_ASSIGN_OR_RETURN(std::vector<double> recent, store.Record(BaselineKey(...), us));
//
// Thread- and process-safe: each key is one file, appended and read under flock.
#ifndef PKB_WORKER_ENGINE_BASELINE_STORE_H_
#define PKB_WORKER_ENGINE_BASELINE_STORE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pkb {

class BaselineStore {
 public:
  // How many of the newest measurements Record returns.
  static constexpr int kKeep = 25;

  explicit BaselineStore(std::string dir) : dir_(std::move(dir)) {}

  // Appends `us` (microseconds per call) under `key`; returns the newest measurements, oldest
  // first, this one last (at most kKeep).
  absl::StatusOr<std::vector<double>> Record(const std::string& key, double us);
  // The newest measurements under `key` (at most kKeep), oldest first; none yet: empty.
  absl::StatusOr<std::vector<double>> Recent(const std::string& key);

 private:
  absl::StatusOr<std::vector<double>> Update(const std::string& key, std::optional<double> us);

  std::string dir_;
};

// The key's text: every parameter the reference's time depends on.
std::string BaselineKey(int problem, int version, int world, int64_t m, int64_t n,
                        const std::string& dtype, int iters, double min_window_ms,
                        const std::string& gpu, const std::string& harness);

}  // namespace pkb

#endif  // PKB_WORKER_ENGINE_BASELINE_STORE_H_
