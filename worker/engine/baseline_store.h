// The reference's time on this node, kept across jobs.
//
// The eager reference is host-bound, and its time moves by tens of percent between processes on
// one node (bimodal on the H200: docs/benchmarks.md), far more than within one. So the baseline a
// speedup is computed against is a property of (problem and version, W, M, N, dtype, timed
// iterations, GPU model, harness version) on this node: the median of its newest measurements,
// each job adding its own. The job's own measurement stays in the result beside it, as a drift
// check. A measurement older than the store's age limit is no longer the node's (its driver, its
// clocks, what else runs there may have changed since): the newest measurements are those of
// the limit, and a key whose measurements all aged out is measured again (settling, engine.h).
//
//   BaselineStore store(cache_dir + "/baselines");
//   PKB_ASSIGN_OR_RETURN(std::vector<double> recent, store.Record(BaselineKey(...), us));
//
// Thread- and process-safe: each key is one file of lines "<us> <unix seconds>", appended and
// read under flock, and cut to its newest kKeep lines once it holds kCompactAt (in place: a crash
// meanwhile may empty it, and the node then settles that reference again). A line without a time
// (a store written before measurements had one), or dated more than an hour ahead, is left out.
#ifndef PKB_WORKER_ENGINE_BASELINE_STORE_H_
#define PKB_WORKER_ENGINE_BASELINE_STORE_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace pkb {

class BaselineStore {
 public:
  // How many of the newest measurements Record returns.
  static constexpr int kKeep = 25;
  // A key's file is cut to its newest kKeep lines once it holds this many.
  static constexpr int kCompactAt = 4 * kKeep;
  // Measurements older than this are left out (pkb-eval --baseline-max-age-hours).
  static constexpr absl::Duration kMaxAge = absl::Hours(24);

  // `now`: the clock (a test's double where one is given).
  explicit BaselineStore(std::string dir, absl::Duration max_age = kMaxAge,
                         std::function<absl::Time()> now = &absl::Now)
      : dir_(std::move(dir)), max_age_(max_age), now_(std::move(now)) {}

  // Appends `us` (microseconds per call) under `key`; returns the newest measurements younger
  // than the age limit, oldest first, this one last (at most kKeep).
  absl::StatusOr<std::vector<double>> Record(const std::string& key, double us);
  // The newest measurements under `key` younger than the age limit (at most kKeep), oldest
  // first; none: empty.
  absl::StatusOr<std::vector<double>> Recent(const std::string& key);

 private:
  absl::StatusOr<std::vector<double>> Update(const std::string& key, std::optional<double> us);

  std::string dir_;
  absl::Duration max_age_;
  std::function<absl::Time()> now_;
};

// The key's text: every parameter the reference's time depends on.
std::string BaselineKey(int problem, int version, int world, int64_t m, int64_t n,
                        const std::string& dtype, int iters, double min_window_ms,
                        const std::string& gpu, const std::string& harness);

}  // namespace pkb

#endif  // PKB_WORKER_ENGINE_BASELINE_STORE_H_
