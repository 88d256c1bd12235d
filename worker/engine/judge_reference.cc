// The reference's side of the benchmark (Judge::Benchmark, judge_benchmark.cc): its timed rounds,
// its CUDA graph, and its profile pass.
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "common/eval_spec.h"
#include "worker/engine/judge_runner.h"
#include "worker/engine/verdict.h"

namespace pkb {

// Times the reference as the judge times the candidate: the warm-up on a set of its own
// (`warm_in`), then kBaselineRounds windows of the timed iterations (iteration i on set i % sets;
// WindowIterations of them, from the warm-up's second half), each on the judge's wall clock
// from the first call to the device being idle. The rounds' median is the baseline (the eager
// reference is host-bound and its rounds spread); `us` holds the events of every round's marked
// calls (TimerStride: about iters of them, as in the candidate's window). On GPUs
// the spec's iters are then captured in one CUDA graph and replayed in kBaselineRounds windows
// (`graph_round_wall_us`; one launch per window, so no fixed cost to spread): the reference
// free of its host overhead, where every rank's can be captured (else `graph_note` says why).
absl::Status Judge::TimeReference(int sets, const std::vector<Inputs>& inputs,
                                  const Inputs& warm_in, std::vector<double>* us,
                                  std::vector<double>* round_wall_us,
                                  std::vector<double>* graph_round_wall_us, std::string* graph_note,
                                  int* iters) {
  auto fn = [&](int s) { return p_.Reference(*comm_, inputs[s], cfg_).status(); };
  auto warm_fn = [&] { return p_.Reference(*comm_, warm_in, cfg_).status(); };
  PKB_RETURN_IF_ERROR(dev_->Synchronize());
  PKB_RETURN_IF_ERROR(comm_->Barrier());
  const int warm = o_.spec.warmup(), timed_warm = warm / 2;
  for (int i = 0; i < warm - timed_warm; ++i) PKB_RETURN_IF_ERROR(warm_fn());
  PKB_RETURN_IF_ERROR(dev_->Synchronize());
  auto v0 = std::chrono::steady_clock::now();
  for (int i = 0; i < timed_warm; ++i) PKB_RETURN_IF_ERROR(warm_fn());
  PKB_RETURN_IF_ERROR(dev_->Synchronize());
  const double warm_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - v0).count();
  PKB_ASSIGN_OR_RETURN(*iters, WindowIterations(warm_us, timed_warm));
  const int n = *iters;
  const int stride = TimerStride(n, o_.spec.iters()), samples = TimedSamples(n, o_.spec.iters());
  us->clear();
  round_wall_us->clear();
  for (int round = 0; round < kBaselineRounds; ++round) {
    PKB_RETURN_IF_ERROR(dev_->Synchronize());
    PKB_RETURN_IF_ERROR(comm_->Barrier());
    dev_->ResetTimers(samples);
    auto w0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) {
      if (i % stride == 0) dev_->Mark(i / stride, 0);
      PKB_RETURN_IF_ERROR(fn(i % sets));
      if (i % stride == 0) dev_->Mark(i / stride, 1);
    }
    PKB_RETURN_IF_ERROR(dev_->Synchronize());
    round_wall_us->push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - w0).count());
    for (int i = 0; i < samples; ++i) us->push_back(dev_->ElapsedUs(i));
  }
  graph_round_wall_us->clear();
  if (dev_->device_type() != PKB_CUDA || shared_gpu()) {
    *graph_note = shared_gpu() ? "the ranks share a GPU" : "no CUDA graphs off the GPU";
    return absl::OkStatus();
  }
  absl::StatusOr<std::function<absl::Status()>> replay = dev_->CaptureGraph([&]() {
    for (int i = 0; i < o_.spec.iters(); ++i) PKB_RETURN_IF_ERROR(fn(i % sets));
    return absl::OkStatus();
  });
  // Every rank replays, or none: a replayed collective waits for its peers.
  PKB_ASSIGN_OR_RETURN(bool everyone, AllOk(replay.ok()));
  if (!everyone) {
    *graph_note = replay.ok() ? "another rank's reference cannot be captured in a CUDA graph"
                              : std::string(replay.status().message());
    return absl::OkStatus();
  }
  PKB_RETURN_IF_ERROR((*replay)());  // the first replay uploads the graph
  for (int round = 0; round < kBaselineRounds; ++round) {
    PKB_RETURN_IF_ERROR(dev_->Synchronize());
    PKB_RETURN_IF_ERROR(comm_->Barrier());
    auto w0 = std::chrono::steady_clock::now();
    PKB_RETURN_IF_ERROR((*replay)());
    PKB_RETURN_IF_ERROR(dev_->Synchronize());
    graph_round_wall_us->push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - w0).count());
  }
  return absl::OkStatus();
}

// The reference's side of the profile pass: one call on `in`, untimed, every rank together.
absl::Status Judge::ProfileReference(const Inputs& in, v1::RankProfile* profile) {
  profile->set_rank(comm_->rank());
  PKB_RETURN_IF_ERROR(comm_->Barrier());
  absl::StatusOr<v1::CallProfile> p =
      dev_->Profile([&]() -> absl::Status { return p_.Reference(*comm_, in, cfg_).status(); });
  PKB_RETURN_IF_ERROR(p.status());
  *profile->mutable_reference() = *std::move(p);
  return absl::OkStatus();
}

}  // namespace pkb
