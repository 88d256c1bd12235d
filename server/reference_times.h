// How long each problem's reference took on this service, per world size and GPU class, from the
// coordinator's own results (ProblemSpec.reference_times): what an agent compares its kernel with
// before it submits.
#ifndef PKB_SERVER_REFERENCE_TIMES_H_
#define PKB_SERVER_REFERENCE_TIMES_H_

#include <map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "pkb/v1/problem.pb.h"
#include "server/job_store.h"

namespace pkb {

// Per (world size, GPU class): the baselines of the newest `per_group` OK results at the
// problem's default shape and dtype (originals only: no cache copies, no confirmation runs, no
// functional runs), ordered by world size, then class.
std::vector<v1::ReferenceTime> ReferenceTimesOf(const std::vector<v1::Job>& newest_first,
                                                const v1::ProblemSpec& problem, int per_group);

// ReferenceTimesOf over the store, answered from memory for `ttl` after each query (GetProblem is
// called in every agent's loop; the figures move only as results arrive).
class ReferenceTimes {
 public:
  static constexpr int kPerGroup = 25;   // results per (W, class), as the nodes' baselines keep
  static constexpr int kScanned = 1000;  // newest OK results of the problem read per query

  ReferenceTimes(JobStore* store, absl::Duration ttl) : store_(store), ttl_(ttl) {}

  absl::StatusOr<std::vector<v1::ReferenceTime>> Of(const v1::ProblemSpec& problem);

 private:
  struct Cached {
    absl::Time at;
    std::vector<v1::ReferenceTime> times;
  };
  JobStore* const store_;
  const absl::Duration ttl_;
  absl::Mutex mu_;
  std::map<int32_t, Cached> cache_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pkb

#endif  // PKB_SERVER_REFERENCE_TIMES_H_
