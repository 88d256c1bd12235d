// The judge of one rank (pkb-rank, rank_main.cc): draws the rank's inputs, starts the candidate
// host and shares the inputs and outputs with it, has it run the candidate in seeded trials,
// runs the reference itself and compares every output, then times both sides and spot-checks
// timed outputs. Everything it measures goes into the rank's RankReport (verdict.h).
#ifndef PKB_WORKER_ENGINE_JUDGE_H_
#define PKB_WORKER_ENGINE_JUDGE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
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
  // Before it times anything, rank 0 waits for the engine's word on its stdin (the line
  // `go_word`, common/quiet_word.h GoWord; other lines are passed over): the engine gives it once
  // the worker has stopped its other work (its compiles) and said so (engine.h
  // EvalOptions::quiet_from), and the other ranks wait for rank 0. A word that never comes (the
  // stdin ended, or kQuietLimitSeconds passed) does not stop the job; rank 0's report says
  // whether it came (RankReport.quiet_word_heard).
  bool await_quiet = false;
  std::string go_word;  // from the rank's report key (pkb-rank sets it once it took the key)
};

// The longest a judge waits for the engine's word to time (RankOptions::await_quiet).
inline constexpr double kQuietLimitSeconds = 10;

// Waits for `o.candidate_gate` to appear (up to o.gate_limit_s): OK when it says go,
// CANCELLED when the engine called the run off, DEADLINE_EXCEEDED when it never came.
absl::Status AwaitCandidate(const RankOptions& o);

class CandidateHost;
class RankDevice;

// A rank started ahead of its job whose engine holds the node's GPU lock (pkb-rank
// --device-early): sets up its device and world communicator, and has its host (spawned already,
// when there is a candidate) set up its own, before the job's spec is known. `world`: the ranks
// started. Nothing of a job is read; RunJudge then adds the problem's groups (and, where ranks
// share a GPU, makes the judges' MPI communicators: MPI has started by then).
// The device is left with the kernels every job's checks launch loaded (WarmJudgeKernels).
absl::StatusOr<std::unique_ptr<RankDevice>> SetUpDeviceEarly(const RankOptions& o, int world,
                                                             CandidateHost* host);

// Launches, once, the kernels of the checks every job runs (poison, comparisons of the common
// output dtypes, the byte moves) on small tensors: their modules are loaded at a kernel's first
// launch, which otherwise falls in the job's first trial (160-220 ms of it on the H200,
// 2026-12-06). Touches no random generator.
absl::Status WarmJudgeKernels(RankDevice* dev);

// Judges this rank of the job: verification, then the benchmark, with the submission in `host`
// (started here unless spawned already; killed, with everything it started, before this
// returns), on `early` when SetUpDeviceEarly made it, else on a device set up here. A failure of
// the candidate is the report's status (RUNTIME_ERROR, MISMATCH, REJECTED); an error status is
// the harness's own (or, ABORTED, the candidate's process died).
// `keep` (optional) receives the judge's device, communicators and memory instead of their
// release here: pkb-rank writes its report first and leaves them to the process's exit (their
// orderly release took 0.3 s of a warm job's 1.3 s on the H200, 2026-12-06).
absl::Status RunJudge(const RankOptions& o, CandidateHost* host, std::unique_ptr<RankDevice> early,
                      v1::RankReport* report, std::vector<std::shared_ptr<void>>* keep = nullptr);

}  // namespace pkb

#endif  // PKB_WORKER_ENGINE_JUDGE_H_
