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

// The run's config on one device with one world size; rejects what the problem cannot run.
absl::Status CheckRunnable(const Problem& p, const RunConfig& cfg);

}  // namespace pkb

#endif  // PKB_PROBLEMS_HARNESS_INPUTS_H_
