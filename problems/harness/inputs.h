// Seeding and drawing a rank's inputs exactly as PKB does.
#ifndef PKB_PROBLEMS_HARNESS_INPUTS_H_
#define PKB_PROBLEMS_HARNESS_INPUTS_H_

#include "problems/harness/problem.h"

namespace pkb {

// Seeds every generator (CPU and CUDA) with p.Seed(rank, set), as torch.manual_seed does, and
// draws the rank's inputs.
Inputs DrawInputs(const Problem& p, const RunConfig& cfg, int rank, int set);

// Every rank's inputs for one set, drawn in this process (for oracles and tests).
std::vector<Inputs> DrawAllInputs(const Problem& p, const RunConfig& cfg, int set);

// The shapes any run of a problem may ask for: 1 <= M <= max_m, 1 <= N <= max_n, M * N <= max_mn.
// They bound what one request can make a worker allocate; the catalog publishes them and the
// coordinator refuses a request beyond them before it is queued.
struct ShapeLimits {
  int64_t max_m = 0;
  int64_t max_n = 0;
  int64_t max_mn = 0;
};
// The same rule for every problem: M and N at most 64 x the default 1024, and M * N at most 64 x
// the default area, lowered so that one rank's inputs and outputs (drawn on the meta device at the
// default shape, assumed to grow with M * N) stay within 4 GiB per input set. Computed once.
ShapeLimits LimitsOf(const Problem& p);

// The run's config on one device with one world size; rejects what the problem cannot run,
// shapes beyond LimitsOf(p) included.
absl::Status CheckRunnable(const Problem& p, const RunConfig& cfg);

}  // namespace pkb

#endif  // PKB_PROBLEMS_HARNESS_INPUTS_H_
