// libFuzzer target: the engine's parsing of what the rank processes hand it — the report files
// and rank 0's progress lines, both writable by the submission (worker/engine/verdict.h). The
// input picks the job's parameters (world size, trials, iterations, which sides were timed),
// then one report blob per rank (or none) and a few progress lines.
//
// Beyond "no crash, no sanitizer report": a report accepted as valid agrees with the job (its
// own rank, at most the trials that ran, one time per timed iteration, finite times), and a
// verdict from valid reports has finite timings.
#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "common/eval_spec.h"
#include "worker/engine/verdict.h"

namespace {

void Fail(const char* what) {
  std::fprintf(stderr, "engine_reports_fuzz invariant broken: %s\n", what);
  std::abort();
}

// Half the time a report the harness could have written, perturbed by the fuzzer's bytes, so
// that the checks past "does it parse" are reached; otherwise raw bytes.
std::string Blob(FuzzedDataProvider& in, const pkb::VerdictContext& ctx, int rank) {
  if (in.ConsumeBool()) return in.ConsumeRandomLengthString(4096);
  pkb::v1::RankReport r;
  r.set_rank(in.ConsumeBool() ? rank : in.ConsumeIntegral<int32_t>());
  r.set_status(static_cast<pkb::v1::Status>(in.ConsumeIntegralInRange<int>(0, 11)));
  r.set_message(in.ConsumeRandomLengthString(64));
  int trials = in.ConsumeIntegralInRange<int>(0, ctx.trials + 1);
  for (int t = 0; t < trials; ++t) {
    auto* trial = r.add_trials();
    trial->set_rank(in.ConsumeBool() ? rank : in.ConsumeIntegral<int32_t>());
    trial->set_trial(in.ConsumeBool() ? t : in.ConsumeIntegral<int32_t>());
    trial->set_ok(in.ConsumeBool());
  }
  int iters = in.ConsumeBool() ? ctx.iters : in.ConsumeIntegralInRange<int>(0, ctx.max_iters + 2);
  r.set_candidate_iters(in.ConsumeBool() ? iters : in.ConsumeIntegral<int32_t>());
  r.set_baseline_iters(in.ConsumeBool() ? iters : in.ConsumeIntegral<int32_t>());
  // Events on every call, or on the marked ones of a longer window (TimerStride), of every round
  // of each side, or of some other count.
  const int events = in.ConsumeBool() ? pkb::TimedSamples(iters, ctx.iters) : iters;
  const int candidate_rounds =
      in.ConsumeBool() ? ctx.candidate_rounds : in.ConsumeIntegral<uint8_t>() % 8;
  const int baseline_rounds =
      in.ConsumeBool() ? pkb::kBaselineRounds : in.ConsumeIntegral<uint8_t>() % 8;
  for (int i = 0; i < events * candidate_rounds; ++i)
    r.add_candidate_us(in.ConsumeBool() ? 10.0 + i : in.ConsumeFloatingPoint<double>());
  for (int i = 0; i < events * baseline_rounds; ++i)
    r.add_baseline_us(in.ConsumeBool() ? 20.0 + i : in.ConsumeFloatingPoint<double>());
  for (int k = 0; k < candidate_rounds; ++k)
    r.add_candidate_round_wall_us(in.ConsumeBool() ? 40.0 + k : in.ConsumeFloatingPoint<double>());
  for (int k = 0; k < baseline_rounds; ++k)
    r.add_baseline_round_wall_us(in.ConsumeBool() ? 80.0 + k : in.ConsumeFloatingPoint<double>());
  r.set_candidate_wall_us(in.ConsumeFloatingPoint<double>());
  r.set_baseline_wall_us(in.ConsumeFloatingPoint<double>());
  r.set_input_sets(in.ConsumeIntegral<int32_t>());
  r.set_spot_checks(in.ConsumeIntegral<int32_t>());
  std::string bytes = r.SerializeAsString();
  // Append a few raw bytes: a second, partial message merged into the first.
  bytes += in.ConsumeRandomLengthString(16);
  return bytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  pkb::VerdictContext ctx;
  ctx.world = in.ConsumeIntegralInRange<int>(1, 8);
  ctx.trials = in.ConsumeIntegralInRange<int>(1, 6);
  ctx.iters = in.ConsumeIntegralInRange<int>(1, 12);
  ctx.max_iters = ctx.iters + in.ConsumeIntegralInRange<int>(0, 12);
  ctx.baseline = in.ConsumeBool();
  ctx.baseline_only = ctx.baseline && in.ConsumeBool();
  ctx.cuda = in.ConsumeBool();
  ctx.candidate_rounds = pkb::CandidateRounds(in.ConsumeBool());
  ctx.hbm_bytes = in.ConsumeFloatingPointInRange<double>(0, 1e12);
  ctx.collective_bytes = in.ConsumeFloatingPointInRange<double>(0, 1e12);
  ctx.busbw_factor = in.ConsumeFloatingPointInRange<double>(0, 2);
  int lines = in.ConsumeIntegralInRange<int>(0, 4);
  for (int i = 0; i < lines; ++i) {
    auto p = pkb::ParseProgress(in.ConsumeRandomLengthString(256), ctx.trials);
    if (p && (p->trial < -1 || p->trial >= ctx.trials)) Fail("a progress trial out of range");
  }
  std::vector<std::optional<std::string>> blobs;
  for (int rank = 0; rank < ctx.world; ++rank) {
    if (in.ConsumeIntegralInRange<int>(0, 7) == 0) {
      blobs.push_back(std::nullopt);
    } else {
      blobs.push_back(Blob(in, ctx, rank));
    }
  }
  pkb::ParsedReports parsed = pkb::ParseRankReports(ctx, blobs);
  if (static_cast<int>(parsed.reports.size()) != ctx.world) Fail("one slot per rank");
  for (int rank = 0; rank < ctx.world; ++rank) {
    const auto& rep = parsed.reports[rank];
    if (!rep) continue;
    if (rep->rank() != rank) Fail("a valid report names another rank");
    if (rep->trials_size() > ctx.trials) Fail("a valid report has extra trials");
    if (rep->message().size() > 4096) Fail("text is not cut");
    for (double x : rep->candidate_us())
      if (!std::isfinite(x) || x < 0) Fail("a valid report has a bad time");
    if (rep->candidate_us_size() != 0 &&
        rep->candidate_us_size() !=
            pkb::TimedSamples(rep->candidate_iters(), ctx.iters) * ctx.candidate_rounds)
      Fail("a valid report has a partial timing series");
    if (rep->candidate_round_wall_us_size() != 0 &&
        rep->candidate_round_wall_us_size() != ctx.candidate_rounds)
      Fail("a valid report has some of the candidate's rounds");
    for (double x : rep->candidate_round_wall_us())
      if (!std::isfinite(x) || x < 0) Fail("a valid report has a bad round");
    if (rep->candidate_iters() != 0 &&
        (rep->candidate_iters() < ctx.iters || rep->candidate_iters() > ctx.max_iters))
      Fail("a valid report ran a window outside the spec's bounds");
  }
  pkb::v1::EvalResult result;
  pkb::CollectRankTrials(parsed, &result);
  if (parsed.Complete()) {
    std::vector<pkb::v1::RankReport> reports;
    for (auto& r : parsed.reports) reports.push_back(*r);
    pkb::Verdict v = pkb::JudgeReports(ctx, reports, &result);
    if (v.log_rank >= ctx.world) Fail("a log rank out of range");
    if (v.status == pkb::v1::OK && !std::isfinite(result.candidate().median_us()))
      Fail("an OK verdict with a non-finite time");
  }
  return 0;
}
