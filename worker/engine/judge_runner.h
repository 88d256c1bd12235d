// The judge's work on one rank once its device, its communicators and the candidate's process
// are set up (RunJudge, judge.cc): verification (judge.cc), then the benchmark
// (judge_benchmark.cc): the timed sets (placed and landed by judge_rounds.cc), the candidate's
// window and its spot checks, the reference's rounds and its CUDA graph. Internal to pkb-rank.
#ifndef PKB_WORKER_ENGINE_JUDGE_RUNNER_H_
#define PKB_WORKER_ENGINE_JUDGE_RUNNER_H_

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pkb/v1/rank_host.pb.h"
#include "pkb/v1/result.pb.h"
#include "problems/harness/inputs.h"
#include "problems/harness/registry.h"
#include "worker/engine/candidate_host.h"
#include "worker/engine/judge.h"
#include "worker/engine/rank_device.h"
#include "worker/engine/shared_arena.h"

namespace pkb {

// A line for the engine on stdout, from rank 0 only: "PKB-PROGRESS <json>".
void ReportProgress(int rank, const std::string& json);

// One round's timed input sets, in an arena that the host maps: their room (`inputs`, `outputs`)
// and their contents as drawn (`drawn`, never shared with the host), which FillRound copies in
// once the host has prepared the round's calls, and which stay the pristine copy the inputs are
// compared with until the next round's draws replace them.
struct TimedRound {
  std::unique_ptr<SharedArena> arena;
  std::vector<Inputs> inputs;
  std::vector<OutputSet> outputs;
  std::vector<Inputs> drawn;
  // The landing, staged once the round's sets are drawn (StageLanding), each one launch of the
  // judge's byte moves (byte_moves.h): the drawn inputs copied into their room (`refill`), and
  // the same with every set's outputs poisoned (`land`). What those cannot move (a tensor whose
  // bytes do not stand for it: not contiguous, a conjugate or negative view, off the judge's
  // device) is copied or poisoned one tensor at a time: `loose_inputs` and `loose_outputs` list
  // them, as set and tensor indices.
  std::unique_ptr<RankDevice::StagedMoves> land, refill;
  std::vector<std::pair<int, int>> loose_inputs, loose_outputs;
};

// Stages a placed round's landing (above), from its drawn sets as they are now.
absl::Status StageLanding(RankDevice* dev, TimedRound* round);
// Copies a placed round's drawn contents into its room (again, to undo what was done to them),
// and with `poison`, poisons every set's outputs (variant 1) too. Enqueued on the device only.
absl::Status FillRound(TimedRound* round, bool poison = false);

// One round of the candidate's and its spot checks (Judge::TimeCandidate): the iterations the host
// copies right after their call (into `copies`, in the checks' arena), those the judge copies the
// moment every host has answered (`in_place`, and the last call, into `at_answer`), and the
// judge's wall clock over the window.
struct RoundChecks {
  std::vector<int> copied;
  std::vector<int> in_place;
  std::map<int, OutputSet> copies;
  std::map<int, std::vector<at::Tensor>> at_answer;
  double wall_us = 0;
};

class Judge {
 public:
  Judge(const RankOptions& o, const Problem& p, RunConfig cfg, RankDevice* dev, Comm* comm,
        CandidateHost* host)
      : o_(o), p_(p), cfg_(cfg), dev_(dev), comm_(comm), host_(host) {}

  // Every rank agrees: true only if `ok` holds on all of them.
  absl::StatusOr<bool> AllOk(bool ok);

  // The inputs the host was given, against a private copy: any change is the candidate's.
  bool InputsUnchanged(const Inputs& shared, const Inputs& pristine, std::string* which);

  // The spec's seeded trials: the candidate's outputs against the reference's on every rank,
  // each trial's verdict in the report; false at the first trial that fails on any rank (the
  // report then says which and why).
  absl::StatusOr<bool> Verify(v1::RankReport* report);

  // How many distinct input sets the timed iterations rotate through: one per timed iteration
  // (`window` of them, the candidate's warm-up's wish, and at least iters), so that no timed call
  // sees contents it has seen before (a candidate that keeps its outputs and replays them on
  // known inputs gains nothing), and together more than `l2_multiple` L2s; at most `max_sets`,
  // and what a quarter of the free memory holds (at most 16 GiB). Where that is fewer than
  // iters, the sets are reused in turn and the report says so; the candidate's window never runs
  // more calls than there are sets beyond that.
  // The ranks agree on the smallest count (their set sizes and free memory may differ), so that
  // timed iteration i of round r uses the same set number on every rank (SetNumber).
  absl::StatusOr<int> TimedSets(int64_t set_bytes, int window);

  // Draws round `round`'s `sets` timed sets for `placed`: the previous round's room where every
  // set has the same sizes, else room in a new arena, the previous round's released first (so
  // that two rounds' arenas never coexist; the new draws and the old arena do, as the first
  // round's draws and its arena). Their contents are copied in by FillRound.
  absl::Status PlaceRound(int round, int sets, TimedRound* placed);

  // How many timed calls a window runs: the spec's iters, or more where those would last less
  // than min_window_ms on the slowest rank, judged from `warm_us` for `warm_calls` calls of the
  // warm-up on this rank's clock (the window's fixed costs then weigh little per call); at most
  // TimedIterationsCap. The same on every rank. A candidate that slows its warm-up only gets a
  // shorter window, in which those fixed costs weigh more on its own time.
  absl::StatusOr<int> WindowIterations(double warm_us, int warm_calls);

  // Times the reference as the judge times the candidate: the warm-up on a set of its own
  // (`warm_in`), then kBaselineRounds windows of the timed iterations (iteration i on set i % sets;
  // WindowIterations of them, from the warm-up's second half), each on the judge's wall clock
  // from the first call to the device being idle. The rounds' median is the baseline (the eager
  // reference is host-bound and its rounds spread); `us` holds the events of every round's marked
  // calls (TimerStride: about iters of them, as in the candidate's window). On GPUs
  // the spec's iters are then captured in one CUDA graph and replayed in kBaselineRounds windows
  // (`graph_round_wall_us`; one launch per window, so no fixed cost to spread): the reference
  // free of its host overhead, where every rank's can be captured (else `graph_note` says why).
  absl::Status TimeReference(int sets, const std::vector<Inputs>& inputs, const Inputs& warm_in,
                             std::vector<double>* us, std::vector<double>* round_wall_us,
                             std::vector<double>* graph_round_wall_us, std::string* graph_note,
                             int* iters);

  // One line in the rank's log on where the timed window's wall clock went, from the host's
  // trace (the same monotonic clock): reaching the host, enqueueing, the device, answering.
  void LogWindow(std::chrono::steady_clock::time_point w0, std::chrono::steady_clock::time_point w1,
                 const std::vector<int64_t>& trace);

  // The harness's own work inside the candidate's window, done again by the judge once the
  // checks are over: `poisons` poisonings of a set's outputs and `copies` copies of them, each
  // costing the larger of its device time and its host time to launch (the best of three), in
  // microseconds. Set 0's outputs stand for every set's.
  absl::StatusOr<double> TimeHarnessWork(std::vector<at::Tensor>& outs, int poisons, int copies);

  // `n` distinct iterations among [first, end), the same on every rank (their spot checks run
  // the reference together), drawn from a seed no candidate sees: each rank adds random bits.
  absl::StatusOr<std::vector<int>> PickIterations(int n, int first, int end);

  // The candidate's warm-up, `warmup` calls on the warm-up's own set, the second half on the
  // judge's clock as one request: how many calls its window should run (WindowIterations).
  absl::StatusOr<int> WarmUpCandidate(const v1::HostCall& warm_call);

  // The candidate's timed rounds (after WarmUpCandidate): CandidateRounds windows of `n` timed
  // iterations, each on input sets of its own (round 0's are `round`'s when called; each later
  // round draws its own, PlaceRound), each on the judge's wall clock until the host answers
  // that its device is idle; the median round is the candidate's figure. Then, with nothing of
  // the submission left running, every round's spot checks against the reference on inputs drawn
  // again, and the harness's own work in a window timed again and taken off each round. Spot
  // checks of each round, picked at random by the ranks together before the first (every round is
  // checked alike; one that skips a fraction f of its calls passes each check with probability
  // about 1 - f), CheckedPerRound of each kind:
  // - `copied`: the host copies their outputs aside right after their call, on the candidate's
  //   stream, so work left on other streams is not there yet;
  // - `in_place`: among the last uses of their sets, copied by the judge the moment every host
  //   has answered; the host never learns which (with one set per iteration, any iteration);
  // - the last iteration, copied the same way.
  // The inputs of the sets copied at the answer are copied then too and compared with the
  // pristine draw before the next round. The profile pass runs `warm_call`.
  absl::Status TimeCandidate(int sets, int n, TimedRound& round, const v1::HostCall& warm_call,
                             v1::RankReport* report);

  // The timed sets' first number, drawn by the ranks together from bits no host sees (each rank
  // adds its own): 1000000 plus 29 random bits. The trials' sets (PKB's seeds, plus the spec's
  // set_offset) can be drawn by anyone who reads the seed rule; the timed ones cannot, so no
  // candidate can work their answers out ahead (in pkb_init, or in an earlier round).
  absl::Status DrawTimedBase();
  // Input set s (s < sets) of round r's timed iterations: the drawn base + r * sets + s; the
  // warm-up's is 999 plus the spec's set_offset.
  int SetNumber(int round, int sets, int s) const {
    return static_cast<int>(timed_base_ + int64_t{round} * sets + s);
  }
  int WarmupSetNumber() const { return static_cast<int>(999 + o_.spec.set_offset()); }
  std::vector<OutputDecl> DeclsOf(int round, int sets, int s) const;

  absl::Status Benchmark(v1::RankReport* report);

 private:
  // The reference's side of the profile pass: one call on `in`, untimed, every rank together.
  absl::Status ProfileReference(const Inputs& in, v1::RankProfile* profile);

  bool shared_gpu() const { return o_.backend == "cuda-shared"; }
  // Whether the judge watches its GPU while the host is stopped (gpu_watch.h): on a GPU of its
  // own (where ranks share one, their contexts take turns anyway, and the run is functional).
  bool watches_gpu() const { return dev_->device_type() == PKB_CUDA && !shared_gpu(); }
  // Keeps what a watch saw `when`: its finding, the first over the limits (watch_finding_), a
  // watch this judge stalled (watch_stall_: GpuWatchStall, unless `peer_wait_us`, the time it
  // waited for other ranks' hosts meanwhile, was half of the watch or more: then a finding), and
  // the figures over every watch of the job (LogWatch).
  void NoteWatch(const GpuWatchReading& reading, const std::string& when, double peer_wait_us = 0);
  void LogWatch() const;
  // The watch for `span` with nothing of the submission left: the control that tells the
  // submission's work from another context's.
  absl::StatusOr<GpuWatchReading> WatchAlone(absl::Duration span);

  // One of the candidate's rounds (TimeCandidate): its window of `n` calls over `round`'s sets
  // with `checks`' picks copied (the host's into `checks_arena`), its events added to `us`, and
  // inputs found changed at the answer added to `failures`.
  absl::Status TimeRound(int r, int sets, int n, TimedRound& round, const SharedArena& checks_arena,
                         RoundChecks& checks, std::vector<double>* us,
                         std::vector<v1::OutputCheck>* failures);
  // Round r's picks against the reference, once the host is gone: failures into the report; how
  // many iterations were checked.
  absl::StatusOr<int> CheckRound(int r, int sets, RoundChecks& checks, v1::RankReport* report);

  // Waits up to `limit` for at most `expected` processes with a compute context on this rank's
  // GPU (its judge, and its host while that runs); "" then, or when the driver cannot say (logged),
  // else what was seen, for the verdict.
  std::string GpuNotAlone(int expected, absl::Duration limit, const char* timing);

  int64_t timed_base_ = 1000;  // DrawTimedBase
  std::string gpu_finding_;    // another process on the GPU while timing, for the verdict
  std::string watch_finding_;  // the first watch over its limits (ReadWatch), for the verdict
  std::string watch_stall_;    // the first watch the judge left to its own limit (GpuWatchStall)
  struct {
    int count = 0;
    // The first start, and the latest start, longest gap and most gaps in one watch of all;
    // ran_us: every watch's span added up.
    double first_start_us = 0, start_us = 0, longest_gap_us = 0, gap_sum_us = 0, ran_us = 0;
  } watch_;
  // A watch saw the submission's work, or was stalled by its judge: the timing ended there.
  bool watch_stopped_ = false;
  int watch_finder_ = -1;    // the lowest rank whose watch saw it (or, without one, stalled)
  int stray_processes_ = 0;  // processes of the submission found alive after its host was killed
  const RankOptions& o_;
  const Problem& p_;
  RunConfig cfg_;
  RankDevice* dev_;
  Comm* comm_;
  CandidateHost* host_;
};

}  // namespace pkb

#endif  // PKB_WORKER_ENGINE_JUDGE_RUNNER_H_
