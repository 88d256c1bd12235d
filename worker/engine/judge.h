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
#include "pkb/v1/spec.pb.h"

namespace pkb {

// One rank's job: the job's spec (the file pkb-eval wrote, spec.proto) and this rank's own
// paths and place, from pkb-rank's flags.
struct RankOptions {
  v1::EvalSpec spec;
  int rank = -1;
  std::string backend = "cuda";
  std::string candidate;  // .so; empty: time the reference only
  std::string report;     // where to write this rank's RankReport (binary)
  std::string rendezvous;
  bool baseline = true;
  // Started while the candidate compiles: this file appears when it is ready (its first line
  // "go"; anything else, "abort" say, means there is nothing to run). The judge sets up its device
  // and communicators, and the host its own, meanwhile; the candidate is loaded once it says go.
  // Empty: `candidate` is ready at start.
  std::string candidate_gate;
  double gate_limit_s = 240;  // the longest wait for the gate
};

// Waits for `path` to exist (pkb-eval writes it whole, by a rename), polling every 2 ms:
// DEADLINE_EXCEEDED naming `what` after `limit_s` seconds.
absl::Status AwaitFile(const std::string& path, double limit_s, const std::string& what);

// Waits for `o.candidate_gate` to appear (up to o.gate_limit_s): OK when it says go,
// CANCELLED when the engine called the run off, DEADLINE_EXCEEDED when it never came.
absl::Status AwaitCandidate(const RankOptions& o);

class CandidateHost;

// Judges this rank of the job: verification, then the benchmark, with the submission in `host`
// (started here unless spawned already; killed, with everything it started, before this
// returns). A failure of the candidate is the report's status (RUNTIME_ERROR, MISMATCH,
// REJECTED); an error status is the harness's own (or, ABORTED, the candidate's process died).
absl::Status RunJudge(const RankOptions& o, CandidateHost* host, v1::RankReport* report);

}  // namespace pkb

#endif  // PKB_WORKER_ENGINE_JUDGE_H_
