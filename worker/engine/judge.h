// The judge of one rank (pkb-rank, rank_main.cc): draws the rank's inputs, starts the candidate
// host and shares the inputs and outputs with it, has it run the candidate in seeded trials,
// runs the reference itself and compares every output, then times both sides and spot-checks
// timed outputs. Everything it measures goes into the rank's RankReport (verdict.h).
#ifndef PKB_WORKER_ENGINE_JUDGE_H_
#define PKB_WORKER_ENGINE_JUDGE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "pkb/v1/result.pb.h"

namespace pkb {

// One rank's job, from pkb-rank's flags.
struct RankOptions {
  int problem = 1;
  int64_t m = 1024, n = 1024;
  std::string dtype = "bfloat16";
  int rank = -1, world = -1;
  std::string backend = "cuda";
  std::string candidate;  // .so; empty: time the reference only
  std::string report;     // where to write this rank's RankReport (binary)
  std::string rendezvous;
  int trials = 5;
  int warmup = 500;
  int iters = 100;
  int64_t set_offset = 0;    // secret seed offset for ranked runs
  double l2_multiple = 3.0;  // timed input sets together exceed this many L2s
  int max_sets = 128;
  int spot_checks = 3;
  bool baseline = true;
};

// Judges this rank of the job: verification, then the benchmark. A failure of the candidate is
// the report's status (RUNTIME_ERROR, MISMATCH, REJECTED); an error status is the harness's own
// (or, ABORTED, the candidate's process died).
absl::Status RunJudge(const RankOptions& o, v1::RankReport* report);

}  // namespace pkb

#endif  // PKB_WORKER_ENGINE_JUDGE_H_
