// The benchmark of one rank (Judge::Benchmark, judge_runner.h): the warm-up's own set, the timed
// sets drawn for the window the candidate's warm-up asks for, the candidate's window with its spot
// checks, then the reference's rounds and its CUDA graph (judge_reference.cc).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/eval_spec.h"
#include "problems/harness/check.h"
#include "problems/harness/inputs.h"
#include "problems/harness/registry.h"
#include "problems/harness/ties.h"
#include "worker/engine/judge_runner.h"
#include "worker/engine/verdict.h"

namespace pkb {

namespace {

// Seconds since `t`, and `t` moved to now: for the benchmark's parts (RankReport.bench_*).
double Lap(std::chrono::steady_clock::time_point* t) {
  const auto now = std::chrono::steady_clock::now();
  const double s = std::chrono::duration<double>(now - *t).count();
  *t = now;
  return s;
}

// The judge's watch over one span (gpu_watch.h), stopped on every way out of it: an error or an
// exception that left its kernel spinning would hold up whatever next waits for the device.
class WatchSpan {
 public:
  explicit WatchSpan(RankDevice* dev) : dev_(dev) {}
  ~WatchSpan() {
    if (on_) (void)dev_->StopWatch();
  }
  absl::Status Start() {
    PKB_RETURN_IF_ERROR(dev_->StartWatch());
    on_ = true;
    return absl::OkStatus();
  }
  absl::StatusOr<GpuWatchReading> Stop() {
    on_ = false;
    return dev_->StopWatch();
  }

 private:
  RankDevice* dev_;
  bool on_ = false;
};

}  // namespace

// How many distinct input sets the timed iterations rotate through: one per timed iteration
// (`window` of them, the candidate's warm-up's wish, and at least iters), so that no timed call
// sees contents it has seen before (a candidate that keeps its outputs and replays them on
// known inputs gains nothing), and together more than `l2_multiple` L2s; at most `max_sets`,
// and what a quarter of the free memory holds (at most 16 GiB). Where that is fewer than
// iters, the sets are reused in turn and the report says so; the candidate's window never runs
// more calls than there are sets beyond that.
// The ranks agree on the smallest count (their set sizes and free memory may differ), so that
// timed iteration i of round r uses the same set number on every rank (SetNumber).
absl::StatusOr<int> Judge::TimedSets(int64_t set_bytes, int window) {
  const double want_l2 = std::ceil(o_.spec.l2_multiple() * dev_->l2_bytes() / set_bytes) + 1;
  const double budget = std::min(16.0 * (1 << 30), dev_->free_bytes() / 4);
  const double fits = std::floor(budget / set_bytes);
  const double want = std::max<double>({want_l2, double(o_.spec.iters()), double(window)});
  const int mine =
      static_cast<int>(std::max(2.0, std::min({want, double(o_.spec.max_sets()), fits})));
  at::Tensor sets = at::full({1}, static_cast<int64_t>(mine),
                             at::TensorOptions().dtype(at::kLong).device(cfg_.device));
  PKB_RETURN_IF_ERROR(comm_->AllReduce(sets, ReduceOp::kMin));
  return static_cast<int>(sets.item<int64_t>());
}

// How many timed calls a window runs: the spec's iters, or more where those would last less
// than min_window_ms on the slowest rank, judged from `warm_us` for `warm_calls` calls of the
// warm-up on this rank's clock (the window's fixed costs then weigh little per call); at most
// TimedIterationsCap. The same on every rank. A candidate that slows its warm-up only gets a
// shorter window, in which those fixed costs weigh more on its own time.
absl::StatusOr<int> Judge::WindowIterations(double warm_us, int warm_calls) {
  const int least = o_.spec.iters(), most = TimedIterationsCap(o_.spec);
  const int64_t mine = warm_calls > 0 ? static_cast<int64_t>(1000.0 * warm_us / warm_calls) : 0;
  at::Tensor per_call_ns = at::full({1}, std::max<int64_t>(mine, 0),
                                    at::TensorOptions().dtype(at::kLong).device(cfg_.device));
  PKB_RETURN_IF_ERROR(comm_->AllReduce(per_call_ns, ReduceOp::kMax));
  const double slowest_ns = static_cast<double>(per_call_ns.item<int64_t>());
  if (most <= least || slowest_ns <= 0 || shared_gpu()) return least;
  const double want = std::ceil(o_.spec.min_window_ms() * 1e6 / slowest_ns);
  return static_cast<int>(std::clamp<double>(want, least, most));
}

// One line in the rank's log on where the timed window's wall clock went, from the host's
// trace (the same monotonic clock): reaching the host, enqueueing, the device, answering.
void Judge::LogWindow(std::chrono::steady_clock::time_point w0,
                      std::chrono::steady_clock::time_point w1, const std::vector<int64_t>& trace) {
  if (trace.size() != 3) return;
  auto ns = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  };
  std::vector<int64_t> t = {ns(w0)};
  t.insert(t.end(), trace.begin(), trace.end());
  t.push_back(ns(w1));
  std::fprintf(stderr,
               "pkb-rank %d: timed window %.1f us: request %.1f, enqueue %.1f, device %.1f, "
               "answer %.1f us (the host's own clock, untrusted)\n",
               comm_->rank(), (t[4] - t[0]) / 1e3, (t[1] - t[0]) / 1e3, (t[2] - t[1]) / 1e3,
               (t[3] - t[2]) / 1e3, (t[4] - t[3]) / 1e3);
}

// The harness's own work inside the candidate's window, done again by the judge once the
// checks are over: `poisons` poisonings of a set's outputs and `copies` copies of them, each
// costing the larger of its device time and its host time to launch (the best of three), in
// microseconds. Set 0's outputs stand for every set's.
absl::StatusOr<double> Judge::TimeHarnessWork(std::vector<at::Tensor>& outs, int poisons,
                                              int copies) {
  if (poisons == 0 && copies == 0) return 0.0;
  constexpr int kTries = 3;
  std::vector<at::Tensor> into;
  for (const auto& t : outs) into.push_back(at::empty_like(t));
  PKB_RETURN_IF_ERROR(dev_->Synchronize());
  dev_->ResetTimers(2 * kTries);
  double poison_host = 1e300, copy_host = 1e300;
  using Clock = std::chrono::steady_clock;
  auto us_since = [](Clock::time_point t) {
    return std::chrono::duration<double, std::micro>(Clock::now() - t).count();
  };
  for (int k = 0; k < kTries; ++k) {
    auto t0 = Clock::now();
    dev_->Mark(2 * k, 0);
    for (auto& t : outs) Poison(t, k % 2);
    dev_->Mark(2 * k, 1);
    poison_host = std::min(poison_host, us_since(t0));
    auto t1 = Clock::now();
    dev_->Mark(2 * k + 1, 0);
    for (size_t j = 0; j < outs.size(); ++j) into[j].copy_(outs[j]);
    dev_->Mark(2 * k + 1, 1);
    copy_host = std::min(copy_host, us_since(t1));
  }
  PKB_RETURN_IF_ERROR(dev_->Synchronize());
  double poison = 1e300, copy = 1e300;
  for (int k = 0; k < kTries; ++k) {
    poison = std::min(poison, dev_->ElapsedUs(2 * k));
    copy = std::min(copy, dev_->ElapsedUs(2 * k + 1));
  }
  return poisons * std::max(poison, poison_host) + copies * std::max(copy, copy_host);
}

absl::Status Judge::DrawTimedBase() {
  at::Tensor bits = at::full({1}, static_cast<int64_t>(std::random_device{}() & 0x1FFFFFFF),
                             at::TensorOptions().dtype(at::kLong).device(cfg_.device));
  PKB_RETURN_IF_ERROR(comm_->AllReduce(bits, ReduceOp::kSum));
  timed_base_ = 1000000 + bits.item<int64_t>() % (int64_t{1} << 29);
  return absl::OkStatus();
}

// `n` distinct iterations among [first, end), the same on every rank (their spot checks run
// the reference together), drawn from a seed no candidate sees: each rank adds random bits.
absl::StatusOr<std::vector<int>> Judge::PickIterations(int n, int first, int end) {
  at::Tensor seed = at::full({1}, static_cast<int64_t>(std::random_device{}() & 0xFFFFFFF),
                             at::TensorOptions().dtype(at::kLong).device(cfg_.device));
  PKB_RETURN_IF_ERROR(comm_->AllReduce(seed, ReduceOp::kSum));
  std::vector<int> all;
  for (int i = first; i < end; ++i) all.push_back(i);
  std::mt19937_64 rng(static_cast<uint64_t>(seed.item<int64_t>()));
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(std::min<size_t>(n, all.size()));
  std::sort(all.begin(), all.end());
  return all;
}

// The candidate's warm-up, `warmup` calls on the warm-up's own set, the second half on the
// judge's clock as one request: how many calls its window should run (WindowIterations).
absl::StatusOr<int> Judge::WarmUpCandidate(const v1::HostCall& warm_call) {
  v1::HostLoop warm, warm_timed;
  *warm.add_calls() = warm_call;
  *warm_timed.add_calls() = warm_call;
  const int timed_warm = o_.spec.warmup() / 2;
  for (int i = 0; i < o_.spec.warmup() - timed_warm; ++i) warm.add_order(0);
  for (int i = 0; i < timed_warm; ++i) warm_timed.add_order(0);
  warm_timed.set_defer(true);
  PKB_RETURN_IF_ERROR(dev_->Synchronize());
  PKB_RETURN_IF_ERROR(comm_->Barrier());
  if (warm.order_size() > 0) PKB_RETURN_IF_ERROR(host_->Loop(warm));
  double warm_us = 0;
  if (timed_warm > 0) {
    PKB_RETURN_IF_ERROR(host_->Loop(warm_timed));
    host_->Wake();  // continued before the clock starts, and stopped after it ends
    auto v0 = std::chrono::steady_clock::now();
    PKB_RETURN_IF_ERROR(host_->RunLoop().status());
    warm_us = std::chrono::duration<double, std::micro>(host_->answered_at() - v0).count();
  }
  return WindowIterations(warm_us, timed_warm);
}

// The candidate's timed rounds (after WarmUpCandidate): see judge_runner.h.
absl::Status Judge::TimeCandidate(int sets, int n, TimedRound& round, const v1::HostCall& warm_call,
                                  v1::RankReport* report) {
  auto lap = std::chrono::steady_clock::now();
  report->set_candidate_iters(n);
  const int timed_rounds = CandidateRounds(o_.spec.functional());
  const int per_round = CheckedPerRound(o_.spec.spot_checks(), n, timed_rounds);
  // Every round's picks, made before the first round (its timing says nothing of them), and
  // room for the host's copies in an arena of their own that lives through every round.
  std::vector<RoundChecks> rounds(timed_rounds);
  size_t copy_bytes = 0;
  for (int r = 0; r < timed_rounds; ++r) {
    PKB_ASSIGN_OR_RETURN(rounds[r].copied, PickIterations(per_round, 0, n));
    PKB_ASSIGN_OR_RETURN(rounds[r].in_place, PickIterations(per_round, std::max(0, n - sets), n));
    for (int i : rounds[r].copied)
      copy_bytes += SharedArena::BytesFor(Inputs(), DeclsOf(r, sets, i % sets));
  }
  // (Mapped whenever there are picks to copy, even where all their outputs are empty: the
  // host finds every snapshot's tensors in a segment it has.)
  SharedArena checks_arena(dev_, host_);
  if (per_round > 0) PKB_RETURN_IF_ERROR(checks_arena.Reserve(std::max<size_t>(copy_bytes, 256)));
  for (int r = 0; r < timed_rounds; ++r) {
    for (int i : rounds[r].copied) {
      PKB_ASSIGN_OR_RETURN(
          auto placed, checks_arena.PlaceSet(Inputs(), DeclsOf(r, sets, i % sets), cfg_.device));
      rounds[r].copies[i] = std::move(placed.second);
    }
  }
  std::vector<double> us;
  std::vector<v1::OutputCheck> changed_inputs;
  double draws = 0;
  for (int r = 0; r < timed_rounds; ++r) {
    if (r > 0) {
      auto d0 = std::chrono::steady_clock::now();
      PKB_RETURN_IF_ERROR(PlaceRound(r, sets, &round));
      draws += Lap(&d0);
    }
    PKB_RETURN_IF_ERROR(
        TimeRound(r, sets, n, round, checks_arena, rounds[r], &us, &changed_inputs));
    if (watches_gpu()) {
      // Work of the submission's seen on any rank's GPU between requests ends its timing on
      // every rank: the verdict is REJECTED, and nothing more of it runs (no profile pass, whose
      // tracing would wait on a kernel that never ends). So does a watch its judge stalled
      // (GpuWatchStall), whose next rounds would stall again: INTERNAL, nobody blamed. Each rank
      // offers its rank (a finding), W + its rank (a stall) or 2 W; the least wins.
      const int w = comm_->size();
      const int64_t offer = !watch_finding_.empty() ? comm_->rank()
                            : !watch_stall_.empty() ? w + comm_->rank()
                                                    : 2 * w;
      at::Tensor first =
          at::full({1}, offer, at::TensorOptions().dtype(at::kLong).device(cfg_.device));
      PKB_RETURN_IF_ERROR(comm_->AllReduce(first, ReduceOp::kMin));
      const int64_t won = first.item<int64_t>();
      if (won < 2 * w) {
        watch_stopped_ = true;
        watch_finder_ = static_cast<int>(won % w);
        LogWatch();
        if (won >= w && gpu_finding_.empty()) {
          gpu_finding_ = !watch_stall_.empty()
                             ? watch_stall_
                             : absl::StrCat("the timing ended on every rank when rank ",
                                            watch_finder_, "'s judge stalled its own GPU watch");
        }
        PKB_ASSIGN_OR_RETURN(stray_processes_, host_->Kill());
        // The host's dying context is gone before the control watch (Benchmark) looks.
        if (gpu_finding_.empty())
          gpu_finding_ = GpuNotAlone(1, absl::Seconds(5), "the judge's control watch");
        return comm_->Barrier();
      }
    }
  }
  report->set_bench_inputs_seconds(report->bench_inputs_seconds() + draws);
  report->set_bench_window_seconds(Lap(&lap) - draws);
  // The profile pass: one more call, untimed, on the warm-up's set (whose outputs are never
  // checked), with the GPU's activity recorded in the host. Informative: a failure is a note.
  PKB_RETURN_IF_ERROR(comm_->Barrier());
  absl::StatusOr<v1::CallProfile> profile = host_->Profile(warm_call);
  report->set_bench_profile_seconds(Lap(&lap));
  v1::RankProfile* rank_profile = report->mutable_profile();
  rank_profile->set_rank(comm_->rank());
  if (profile.ok()) {
    *rank_profile->mutable_candidate() = *std::move(profile);
  } else {
    rank_profile->mutable_candidate()->set_note(
        absl::StrCat("the profile call failed: ", profile.status().message()));
  }
  LogWatch();
  // Nothing of the submission runs from here on, no process it started either: it cannot
  // disturb the checks or the reference's timing.
  PKB_ASSIGN_OR_RETURN(stray_processes_, host_->Kill());
  PKB_RETURN_IF_ERROR(comm_->Barrier());
  for (double x : us) report->add_candidate_us(x);
  int checked = 0;
  for (int r = 0; r < timed_rounds; ++r) {
    PKB_ASSIGN_OR_RETURN(int in_round, CheckRound(r, sets, rounds[r], report));
    checked += in_round;
  }
  for (auto& c : changed_inputs) *report->add_spot_failures() = std::move(c);
  report->set_spot_checks(checked);
  // And nothing but the judge on the GPU before anything more is timed: the host's dying context
  // takes a moment, which the checks above (timing nothing) spent.
  if (gpu_finding_.empty() && !shared_gpu())
    gpu_finding_ = GpuNotAlone(1, absl::Seconds(5), "the reference");
  const int repoisons = sets < n ? n - sets : 0;
  PKB_ASSIGN_OR_RETURN(double harness,
                       TimeHarnessWork(round.outputs[0].tensors, repoisons, per_round));
  // Each round's wall clock reported is the candidate's share: the judge's clock over the
  // window less the harness's own work in it; the figure is the median round.
  std::vector<double> walls;
  for (const auto& rc : rounds) {
    walls.push_back(std::max(0.0, rc.wall_us - harness));
    report->add_candidate_round_wall_us(walls.back());
  }
  std::sort(walls.begin(), walls.end());
  report->set_candidate_wall_us(walls[walls.size() / 2]);
  report->set_bench_checks_seconds(Lap(&lap));
  if (o_.baseline) {
    // The reference is timed on the last round's sets, copied into their room again from the
    // judge's own draws now that the host is gone: whatever the submission left there (work that
    // ran on after its answer), the reference meets the inputs as drawn.
    PKB_RETURN_IF_ERROR(FillRound(&round));
    report->set_bench_inputs_seconds(report->bench_inputs_seconds() + Lap(&lap));
  }
  return absl::OkStatus();
}

absl::Status Judge::TimeRound(int r, int sets, int n, TimedRound& round,
                              const SharedArena& checks_arena, RoundChecks& checks,
                              std::vector<double>* us, std::vector<v1::OutputCheck>* failures) {
  // Where the round's time goes, for the rank log (issue 22: the rounds' share of a job).
  auto t0 = std::chrono::steady_clock::now();
  v1::HostLoop timed;
  for (int s = 0; s < sets; ++s) {
    PKB_ASSIGN_OR_RETURN(*timed.add_calls(),
                         round.arena->Describe(round.inputs[s], round.outputs[s]));
  }
  for (int i = 0; i < n; ++i) timed.add_order(i % sets);
  timed.set_timed(true);
  timed.set_timer_stride(TimerStride(n, o_.spec.iters()));
  timed.set_repoison(sets < n);
  timed.set_defer(true);
  for (const auto& [i, copy] : checks.copies) {
    PKB_ASSIGN_OR_RETURN(v1::HostCall where, checks_arena.Describe(Inputs(), copy));
    auto* snap = timed.add_snapshots();
    snap->set_iteration(i);
    *snap->mutable_into() = where.outputs();
  }
  // The judge's own copies of what is checked as the host answered (the in-place picks and the
  // last call), allocated before the window so that taking them is only a copy: their outputs
  // kept for the checks after the host is gone, their inputs compared at once.
  std::vector<int> answered = checks.in_place;
  answered.push_back(n - 1);
  std::map<int, std::vector<at::Tensor>> inputs_then;
  for (int i : answered) {
    auto& into = checks.at_answer[i];
    if (!into.empty()) continue;
    for (const auto& t : round.outputs[i % sets].tensors) into.push_back(at::empty_like(t));
    for (const auto& t : round.inputs[i % sets].tensors)
      inputs_then[i].push_back(at::empty_like(t));
  }
  // The host prepares the round's calls before any of its inputs is there, and is stopped once it
  // has answered (CandidateHost): nothing of the submission runs from when they land until the
  // window, so nothing can be worked out ahead of it.
  PKB_RETURN_IF_ERROR(host_->Loop(timed));
  const auto prepared = std::chrono::steady_clock::now();
  // From here to the window, the GPU runs the judge's work only: its watch sees any other.
  const bool watch = watches_gpu();
  WatchSpan span(dev_);
  if (watch) PKB_RETURN_IF_ERROR(span.Start());
  const auto watched = std::chrono::steady_clock::now();
  // Skipped work must leave poison: every set's outputs are poisoned before the window (and by
  // the host after each use but the last when sets come back).
  PKB_RETURN_IF_ERROR(FillRound(&round, /*poison=*/true));
  const auto enqueued = std::chrono::steady_clock::now();
  // Nothing but this rank's judge and host may hold the GPU while the candidate is timed
  // (where ranks share a GPU, the run is functional and its timings are not compared).
  if (gpu_finding_.empty() && !shared_gpu())
    gpu_finding_ = GpuNotAlone(2, absl::Seconds(2), "the candidate");
  const auto listed = std::chrono::steady_clock::now();
  PKB_RETURN_IF_ERROR(watch ? dev_->SynchronizeStream() : dev_->Synchronize());
  const auto landed = std::chrono::steady_clock::now();
  PKB_RETURN_IF_ERROR(comm_->Barrier());
  if (watch) {
    PKB_ASSIGN_OR_RETURN(GpuWatchReading seen, span.Stop());
    NoteWatch(seen, absl::StrCat("while round ", r + 1, "'s inputs landed"));
  }
  // The host runs the timed iterations between its own timers (untrusted); the wall clock
  // over the window is ours, and stops when the host says its device is idle.
  // The host is continued before the clock starts and stopped after it ends (answered_at): its
  // stop and continue are the judge's work, not the candidate's time.
  // And the watch again from the answer (before the host is stopped, so the time its stop takes
  // is watched too) until what is checked is copied aside: the host said its device was idle.
  host_->Wake();
  auto w0 = std::chrono::steady_clock::now();
  PKB_ASSIGN_OR_RETURN(std::vector<int64_t> trace,
                       host_->RunLoop([&] { return watch ? span.Start() : absl::OkStatus(); }));
  auto w1 = host_->answered_at();
  checks.wall_us = std::chrono::duration<double, std::micro>(w1 - w0).count();
  LogWindow(w0, w1, trace);
  // Once every rank's host has answered (a peer's writes into this rank's outputs are done
  // by then), what is checked in place is copied aside at once: had the hosts answered
  // before their work was done, to stop our clock early and finish later, it is not there.
  const auto peers0 = std::chrono::steady_clock::now();
  PKB_RETURN_IF_ERROR(comm_->Barrier());
  // The other ranks' hosts answer when the submission lets them: time spent waiting for them is
  // the submission's, not a stall of this judge's (NoteWatch).
  const double peer_wait_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - peers0).count();
  for (auto& [i, into] : checks.at_answer) {
    for (size_t k = 0; k < into.size(); ++k) into[k].copy_(round.outputs[i % sets].tensors[k]);
  }
  for (auto& [i, into] : inputs_then) {
    for (size_t k = 0; k < into.size(); ++k) into[k].copy_(round.inputs[i % sets].tensors[k]);
  }
  if (watch) {
    PKB_RETURN_IF_ERROR(dev_->SynchronizeStream());
    PKB_ASSIGN_OR_RETURN(GpuWatchReading seen, span.Stop());
    NoteWatch(seen, absl::StrCat("after round ", r + 1, "'s answer"), peer_wait_us);
  }
  PKB_RETURN_IF_ERROR(dev_->Synchronize());
  const auto copied = std::chrono::steady_clock::now();
  PKB_ASSIGN_OR_RETURN(std::vector<double> times, host_->Times());
  us->insert(us->end(), times.begin(), times.end());
  for (auto& [i, tensors] : inputs_then) {
    Inputs then = round.inputs[i % sets];
    then.tensors = std::move(tensors);
    std::string changed;
    if (!InputsUnchanged(then, round.drawn[i % sets], &changed)) {
      v1::OutputCheck c;
      c.set_name(
          absl::StrCat("input '", changed, "' (round ", r + 1, ", timed iteration ", i, ")"));
      c.set_problem("modified by the candidate");
      failures->push_back(std::move(c));
    }
  }
  auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  std::fprintf(
      stderr,
      "pkb-rank %d: round %d of %d calls on %d sets: prepare %.1f ms, land %.1f ms "
      "(watch started %.1f, copies and poison enqueued %.1f with %zu tensors one at a time, "
      "GPU process list %.1f, "
      "stream done %.1f, barrier and the host continued %.1f), window %.1f ms, answer "
      "to copies taken %.1f ms (the host stopped, the other ranks' answers, the "
      "copies), times and input checks %.1f ms\n",
      comm_->rank(), r + 1, n, sets, ms(t0, prepared), ms(prepared, w0), ms(prepared, watched),
      ms(watched, enqueued), round.loose_inputs.size() + round.loose_outputs.size(),
      ms(enqueued, listed), ms(listed, landed), ms(landed, w0), ms(w0, w1), ms(w1, copied),
      ms(copied, std::chrono::steady_clock::now()));
  return absl::OkStatus();
}

absl::StatusOr<int> Judge::CheckRound(int r, int sets, RoundChecks& checks,
                                      v1::RankReport* report) {
  std::vector<int> picked = checks.copied;
  for (const auto& [i, into] : checks.at_answer) picked.push_back(i);
  std::sort(picked.begin(), picked.end());
  picked.erase(std::unique(picked.begin(), picked.end()), picked.end());
  for (int i : picked) {
    const int s = i % sets;
    const std::vector<OutputDecl> decls = DeclsOf(r, sets, s);
    Inputs pristine = DrawInputs(p_, cfg_, comm_->rank(), SetNumber(r, sets, s));
    PKB_ASSIGN_OR_RETURN(auto expected, p_.Reference(*comm_, pristine, cfg_));
    PKB_ASSIGN_OR_RETURN(auto tie_keys, TieKeysOf(p_, *comm_, pristine, cfg_, expected));
    std::vector<v1::OutputCheck> found;
    if (checks.copies.count(i)) {
      PKB_ASSIGN_OR_RETURN(
          found, CompareOutputs(p_, cfg_, decls, checks.copies[i].tensors, expected, 1, tie_keys));
      for (auto& c : found)
        c.set_name(absl::StrCat(c.name(), " (round ", r + 1, ", timed iteration ", i, ")"));
    }
    if (checks.at_answer.count(i)) {
      PKB_ASSIGN_OR_RETURN(
          auto then, CompareOutputs(p_, cfg_, decls, checks.at_answer[i], expected, 1, tie_keys));
      for (auto& c : then) {
        c.set_name(absl::StrCat(c.name(), " (round ", r + 1, ", timed iteration ", i,
                                ", when the host answered)"));
        found.push_back(std::move(c));
      }
    }
    for (auto& c : found) {
      if (!c.ok()) *report->add_spot_failures() = c;
    }
  }
  return static_cast<int>(picked.size());
}

absl::Status Judge::Benchmark(v1::RankReport* report) {
  auto t0 = std::chrono::steady_clock::now();
  auto lap = t0;
  const bool candidate = host_->running();
  // The warm-up's own input set, in an arena of its own and placed first: the candidate's
  // warm-up says how long its window should be, and so how many timed sets to draw.
  const std::vector<OutputDecl> warm_decls =
      p_.OutputsOfSet(cfg_, comm_->rank(), WarmupSetNumber());
  Inputs warm_drawn = DrawInputs(p_, cfg_, comm_->rank(), WarmupSetNumber());
  SharedArena warm_arena(dev_, host_);
  PKB_RETURN_IF_ERROR(warm_arena.Reserve(SharedArena::BytesFor(warm_drawn, warm_decls)));
  PKB_ASSIGN_OR_RETURN(auto warm_set, warm_arena.PlaceSet(warm_drawn, warm_decls, cfg_.device));
  warm_drawn = Inputs();
  PKB_ASSIGN_OR_RETURN(const v1::HostCall warm_call,
                       warm_arena.Describe(warm_set.first, warm_set.second));
  double inputs_s = Lap(&lap);
  int wanted = o_.spec.iters();
  if (candidate) {
    PKB_ASSIGN_OR_RETURN(wanted, WarmUpCandidate(warm_call));
  }
  report->set_bench_warmup_seconds(Lap(&lap));
  const int64_t set_bytes = static_cast<int64_t>(
      std::max<size_t>(1, SharedArena::BytesFor(DrawInputs(p_, cfg_, comm_->rank(), 0),
                                                p_.OutputsOfSet(cfg_, comm_->rank(), 0))));
  PKB_ASSIGN_OR_RETURN(const int sets, TimedSets(set_bytes, wanted));
  report->set_input_sets(sets);
  // The candidate's window: the calls its warm-up asked for, but no more than there are sets,
  // so that every timed call meets contents no earlier call met (a cache of answers keyed by
  // content would replay the rest, correctly and for free). Where fewer sets than `iters` fit
  // in memory, `iters` calls with the sets coming back, as input_sets shows.
  const int n =
      sets >= o_.spec.iters() ? std::max(o_.spec.iters(), std::min(wanted, sets)) : o_.spec.iters();
  // Round 0's timed sets (the reference is timed on the last round's), from seeds no host knows.
  PKB_RETURN_IF_ERROR(DrawTimedBase());
  TimedRound round;
  PKB_RETURN_IF_ERROR(PlaceRound(0, sets, &round));
  if (!candidate) PKB_RETURN_IF_ERROR(FillRound(&round));
  report->set_bench_inputs_seconds(inputs_s + Lap(&lap));
  if (candidate) {
    PKB_RETURN_IF_ERROR(TimeCandidate(sets, n, round, warm_call, report));
    Lap(&lap);
  }
  std::vector<double> us;
  if ((o_.baseline || watch_stopped_) && watches_gpu() && gpu_finding_.empty()) {
    // Nothing of the submission is left; the watch alone on the GPU for a while, beside nothing:
    // what it sees now is not the submission's (another context, which the driver's list misses
    // outside this sandbox's PID namespace), and no timing of this job can be trusted.
    // Longer where the submission is to be blamed: another context's occasional work must have
    // had its chance to show.
    PKB_ASSIGN_OR_RETURN(
        GpuWatchReading alone,
        WatchAlone(absl::Milliseconds(watch_stopped_ ? kWatchAloneBlamingMs : kWatchAloneMs)));
    const char* when = "with the submission's host gone, before the reference was timed";
    gpu_finding_ = GpuWatchFinding(alone, when);
    if (gpu_finding_.empty()) gpu_finding_ = GpuWatchStall(alone, when);
  }
  if (o_.baseline && !watch_stopped_) {
    std::vector<double> rounds, graph_rounds;
    std::string graph_note;
    int iters = 0;
    PKB_RETURN_IF_ERROR(TimeReference(sets, round.inputs, warm_set.first, &us, &rounds,
                                      &graph_rounds, &graph_note, &iters));
    report->set_bench_reference_seconds(Lap(&lap));
    report->set_baseline_iters(iters);
    for (double x : us) report->add_baseline_us(x);
    for (double x : rounds) report->add_baseline_round_wall_us(x);
    for (double x : graph_rounds) report->add_baseline_graph_round_wall_us(x);
    report->set_baseline_graph_note(graph_note);
    PKB_RETURN_IF_ERROR(ProfileReference(warm_set.first, report->mutable_profile()));
    report->set_bench_profile_seconds(report->bench_profile_seconds() + Lap(&lap));
    std::vector<double> sorted = rounds;
    std::sort(sorted.begin(), sorted.end());
    report->set_baseline_wall_us(sorted[sorted.size() / 2]);
  }
  report->set_stage_benchmark_seconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  if (!gpu_finding_.empty() && report->status() == v1::OK) {
    report->set_status(v1::INTERNAL);
    report->set_message(absl::StrCat("rank ", comm_->rank(), ": ", gpu_finding_,
                                     "; the timings cannot be trusted"));
  }
  if (gpu_finding_.empty() && !watch_finding_.empty()) {
    // Nothing but the judge and its host hold a context on this GPU (GpuNotAlone): the other
    // work its watch saw is the submission's, run while its host was stopped, off the clock.
    report->set_status(v1::REJECTED);
    report->set_message(absl::StrCat(
        "rank ", comm_->rank(),
        ": the GPU ran work of the submission's while its host was stopped between the judge's "
        "requests (a kernel left running past an answer, or work queued to start later): ",
        watch_finding_));
  }
  if (gpu_finding_.empty() && watch_stopped_ && watch_finding_.empty()) {
    report->set_status(v1::REJECTED);
    report->set_message(absl::StrCat(
        "rank ", comm_->rank(), ": the timing ended on every rank when rank ", watch_finder_,
        "'s GPU watch saw work of the submission's while its host was stopped"));
  }
  if (stray_processes_ == 0 && !host_->tampered().empty()) {
    // Between requests the host is stopped (CandidateHost::Pause): the submission worked against
    // that, so its code may have run where nothing of it may.
    report->set_status(v1::REJECTED);
    report->set_message(absl::StrCat(
        "rank ", comm_->rank(),
        ": the submission's process ran between the judge's requests, where it is stopped: ",
        host_->tampered()));
  }
  if (stray_processes_ > 0) {
    // Nothing honest starts a process (the source rules forbid it); one that outlives the
    // host could have run during the reference's timing had the judge not killed it.
    report->set_status(v1::REJECTED);
    report->set_message(absl::StrCat("rank ", comm_->rank(), ": the submission started ",
                                     stray_processes_,
                                     " process(es) that outlived its host; the judge killed them "
                                     "before timing the reference"));
  }
  return absl::OkStatus();
}

}  // namespace pkb
