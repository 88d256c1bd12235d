#include "worker/engine/verdict.h"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/eval_spec.h"
#include "common/files.h"

namespace pkb {
namespace {

VerdictContext Ctx(int world) {
  VerdictContext c;
  c.world = world;
  c.trials = 3;
  c.iters = 4;
  c.max_iters = 16;
  c.hbm_bytes = 4.3e6;  // a floor of 1 us
  return c;
}

// What the harness of `rank` writes for a passing run of Ctx().
v1::RankReport Passing(int rank, double us = 10) {
  v1::RankReport r;
  r.set_rank(rank);
  r.set_status(v1::OK);
  for (int t = 0; t < 3; ++t) {
    auto* trial = r.add_trials();
    trial->set_rank(rank);
    trial->set_trial(t);
    trial->set_ok(true);
  }
  r.set_candidate_iters(4);
  r.set_baseline_iters(4);
  for (int i = 0; i < 4 * kCandidateRounds; ++i) r.add_candidate_us(us);
  for (int i = 0; i < 4 * kBaselineRounds; ++i) r.add_baseline_us(2 * us);
  r.set_candidate_wall_us(4 * us);
  for (int k = 0; k < kCandidateRounds; ++k) r.add_candidate_round_wall_us(4 * us);
  for (int k = 0; k < kBaselineRounds; ++k) r.add_baseline_round_wall_us(8 * us);
  r.set_baseline_wall_us(8 * us);
  r.set_input_sets(2);
  r.set_spot_checks(3);
  r.set_device_name("test device");
  return r;
}

std::vector<std::optional<std::string>> Blobs(const std::vector<v1::RankReport>& reports) {
  std::vector<std::optional<std::string>> b;
  for (const auto& r : reports) b.push_back(r.SerializeAsString());
  return b;
}

std::string OnlyReason(const VerdictContext& ctx, const std::vector<v1::RankReport>& reports) {
  ParsedReports p = ParseRankReports(ctx, Blobs(reports));
  REQUIRE(p.malformed.size() == 1);
  CHECK_FALSE(p.Complete());
  return p.malformed[0];
}

TEST_CASE("reports the harness writes pass and give an OK verdict with the slowest rank's time") {
  VerdictContext ctx = Ctx(2);
  ParsedReports p = ParseRankReports(ctx, Blobs({Passing(0, 10), Passing(1, 12)}));
  REQUIRE(p.malformed.empty());
  REQUIRE(p.Complete());
  std::vector<v1::RankReport> reports = {*p.reports[0], *p.reports[1]};
  v1::EvalResult r;
  Verdict v = JudgeReports(ctx, reports, &r);
  CHECK(v.status == v1::OK);
  CHECK(r.candidate().median_us() == 12);
  CHECK(r.baseline().median_us() == 24);
  CHECK(r.candidate().wall_per_iter_us() == 12);
  CHECK(r.baseline().wall_per_iter_us() == 24);
  CHECK(r.speedup() == 2);
  CHECK(r.speedup_events() == 2);
  CHECK(r.roofline().floor_us() == Approx(1.0));
}

TEST_CASE("the speedup rests on the judges' clocks: forged events move nothing but PKB's figure") {
  VerdictContext ctx = Ctx(1);
  v1::RankReport honest = Passing(0, 10);
  v1::RankReport forged = Passing(0, 10);
  forged.clear_candidate_us();
  for (int i = 0; i < 4 * kCandidateRounds; ++i) forged.add_candidate_us(2.5);  // a quarter
  v1::EvalResult h, f;
  REQUIRE(JudgeReports(ctx, {honest}, &h).status == v1::OK);
  REQUIRE(JudgeReports(ctx, {forged}, &f).status == v1::OK);
  CHECK(f.speedup() == h.speedup());
  CHECK(f.speedup_events() == 4 * h.speedup_events());
  CHECK(f.roofline().percent_of_roofline() == h.roofline().percent_of_roofline());
}

TEST_CASE("the baseline is the median round, and its spread bounds the speedup") {
  VerdictContext ctx = Ctx(2);
  v1::RankReport a = Passing(0, 10), b = Passing(1, 10);
  a.clear_baseline_round_wall_us();
  b.clear_baseline_round_wall_us();
  // Per iteration (4 iterations a window), slowest rank per round: 20, 22, 30, 18, 24.
  for (double x : {80.0, 88.0, 100.0, 60.0, 96.0}) a.add_baseline_round_wall_us(x);
  for (double x : {70.0, 80.0, 120.0, 72.0, 90.0}) b.add_baseline_round_wall_us(x);
  v1::EvalResult r;
  REQUIRE(JudgeReports(ctx, {a, b}, &r).status == v1::OK);
  CHECK(r.baseline().round_wall_per_iter_us_size() == kBaselineRounds);
  CHECK(r.baseline().wall_per_iter_us() == Approx(22));
  CHECK(r.speedup() == Approx(2.2));
  CHECK(r.speedup_low() == Approx(1.8));
  CHECK(r.speedup_high() == Approx(3.0));
}

TEST_CASE("the candidate's figure is its median round, and its rounds widen the interval") {
  VerdictContext ctx = Ctx(2);
  v1::RankReport a = Passing(0, 10), b = Passing(1, 10);
  a.clear_candidate_round_wall_us();
  b.clear_candidate_round_wall_us();
  // Per call (4 a window), slowest rank per round: 10, 12, 9, 11, 16 (one slow round).
  for (double x : {40.0, 48.0, 36.0, 40.0, 64.0}) a.add_candidate_round_wall_us(x);
  for (double x : {32.0, 40.0, 32.0, 44.0, 60.0}) b.add_candidate_round_wall_us(x);
  ParsedReports p = ParseRankReports(ctx, Blobs({a, b}));
  REQUIRE(p.Complete());
  v1::EvalResult r;
  REQUIRE(JudgeReports(ctx, {*p.reports[0], *p.reports[1]}, &r).status == v1::OK);
  CHECK(r.candidate().round_wall_per_iter_us_size() == kCandidateRounds);
  CHECK(r.candidate().wall_per_iter_us() == Approx(11));  // the slow round moves nothing
  CHECK(r.speedup() == Approx(20.0 / 11));
  // The baseline's rounds are all 20 us a call: the interval is the candidate's rounds'.
  CHECK(r.speedup_low() == Approx(20.0 / 16));
  CHECK(r.speedup_high() == Approx(20.0 / 9));
  // Against a node's baseline too.
  ApplyNodeBaseline({18, 19, 20, 21, 22}, &r);
  CHECK(r.speedup() == Approx(20.0 / 11));
  CHECK(r.speedup_low() == Approx(18.4 / 16));
  CHECK(r.speedup_high() == Approx(21.6 / 9));
}

// Passing(rank, us) with windows of `cand` and `base` calls (min_window_ms lengthened them).
v1::RankReport Lengthened(int rank, int cand, int base, double us = 10) {
  v1::RankReport r = Passing(rank, us);
  r.set_candidate_iters(cand);
  r.set_baseline_iters(base);
  r.clear_candidate_us();
  r.clear_baseline_us();
  r.clear_baseline_round_wall_us();
  // Events on every ceil(calls / iters)-th call (TimerStride).
  r.clear_candidate_round_wall_us();
  for (int i = 0; i < TimedSamples(cand, 4) * kCandidateRounds; ++i) r.add_candidate_us(us);
  for (int i = 0; i < TimedSamples(base, 4) * kBaselineRounds; ++i) r.add_baseline_us(2 * us);
  r.set_candidate_wall_us(cand * us);
  for (int k = 0; k < kCandidateRounds; ++k) r.add_candidate_round_wall_us(cand * us);
  for (int k = 0; k < kBaselineRounds; ++k) r.add_baseline_round_wall_us(base * 2 * us);
  return r;
}

TEST_CASE("windows longer than iters: each side's time per call over its own count") {
  VerdictContext ctx = Ctx(2);
  ParsedReports p = ParseRankReports(ctx, Blobs({Lengthened(0, 12, 8), Lengthened(1, 12, 8)}));
  REQUIRE(p.malformed.empty());
  v1::EvalResult r;
  REQUIRE(JudgeReports(ctx, {*p.reports[0], *p.reports[1]}, &r).status == v1::OK);
  CHECK(r.candidate().iterations() == 12);
  CHECK(r.baseline().iterations() == 8);
  CHECK(r.candidate().wall_per_iter_us() == Approx(10));
  CHECK(r.baseline().wall_per_iter_us() == Approx(20));
  CHECK(r.speedup() == Approx(2));
  CHECK(r.candidate().samples() == 4 * kCandidateRounds);  // calls 0, 3, 6 and 9 of each round
}

TEST_CASE("a window's count outside the spec's bounds, or ranks that disagree, are not judged") {
  VerdictContext ctx = Ctx(2);
  // Fewer than iters, or more than max_iters.
  CHECK_THAT(OnlyReason(ctx, {Passing(0), Lengthened(1, 3, 4)}),
             Catch::Contains("3 timed calls per window, outside 4..16"));
  CHECK_THAT(OnlyReason(ctx, {Passing(0), Lengthened(1, 4, 17)}),
             Catch::Contains("17 timed calls per window, outside 4..16"));
  // A count that does not match the samples: 8 calls a round, every second one marked.
  v1::RankReport short_series = Lengthened(1, 8, 4);
  short_series.mutable_candidate_us()->RemoveLast();
  CHECK_THAT(OnlyReason(ctx, {Passing(0), short_series}),
             Catch::Contains("19 timed iterations with events, but 20 were marked"));
  v1::RankReport every_call = Lengthened(1, 8, 4);
  for (int i = 0; i < 4 * kCandidateRounds; ++i) every_call.add_candidate_us(10);
  CHECK_THAT(OnlyReason(ctx, {Passing(0), every_call}),
             Catch::Contains("40 timed iterations with events, but 20 were marked"));
  // A passing rank that says it ran none.
  v1::RankReport none = Passing(1);
  none.set_candidate_iters(0);
  CHECK_THAT(OnlyReason(ctx, {Passing(0), none}), Catch::Contains("but 0 were marked"));
  // Windows of 4 calls only where min_window_ms is 0 (max_iters = iters).
  VerdictContext exact = Ctx(2);
  exact.max_iters = exact.iters;
  CHECK_THAT(OnlyReason(exact, {Passing(0), Lengthened(1, 8, 4)}),
             Catch::Contains("8 timed calls per window, outside 4..4"));
  // Both valid alone, but not the same length: their series cannot be compared call by call.
  v1::EvalResult r;
  Verdict v = JudgeReports(ctx, {Lengthened(0, 8, 4), Lengthened(1, 12, 4)}, &r);
  CHECK(v.status == v1::INTERNAL);
  CHECK_THAT(v.message, Catch::Contains("windows of different lengths"));
}

TEST_CASE("a report the harness could not have written is malformed, with the reason") {
  VerdictContext ctx = Ctx(2);
  v1::RankReport other = Passing(0);  // rank 1's file claims to be rank 0
  CHECK_THAT(OnlyReason(ctx, {Passing(0), other}), Catch::Contains("names rank 0"));

  v1::RankReport many = Passing(1);
  for (int i = 0; i < 5; ++i) *many.add_trials() = many.trials(0);
  CHECK_THAT(OnlyReason(ctx, {Passing(0), many}), Catch::Contains("trials, but 3 were run"));

  v1::RankReport far = Passing(1);
  far.mutable_trials(1)->set_trial(99);
  CHECK_THAT(OnlyReason(ctx, {Passing(0), far}), Catch::Contains("out of range"));

  v1::RankReport nan = Passing(1);
  nan.set_candidate_us(2, std::nan(""));
  CHECK_THAT(OnlyReason(ctx, {Passing(0), nan}), Catch::Contains("timed iteration"));

  v1::RankReport negative = Passing(1);
  negative.set_baseline_us(0, -1);
  CHECK_THAT(OnlyReason(ctx, {Passing(0), negative}), Catch::Contains("timed iteration"));

  v1::RankReport short_series = Passing(1);
  short_series.mutable_candidate_us()->RemoveLast();
  CHECK_THAT(OnlyReason(ctx, {Passing(0), short_series}), Catch::Contains("19 timed iterations"));

  v1::RankReport untimed = Passing(1);
  untimed.clear_candidate_us();
  CHECK_THAT(OnlyReason(ctx, {Passing(0), untimed}), Catch::Contains("without the candidate"));

  v1::RankReport wall = Passing(1);
  wall.set_candidate_wall_us(std::numeric_limits<double>::infinity());
  CHECK_THAT(OnlyReason(ctx, {Passing(0), wall}), Catch::Contains("wall-clock"));
  v1::RankReport round = Passing(1);
  round.set_candidate_round_wall_us(3, -1);
  CHECK_THAT(OnlyReason(ctx, {Passing(0), round}), Catch::Contains("wall-clock"));

  v1::RankReport stage = Passing(1);
  stage.set_status(v1::TIMEOUT);
  CHECK_THAT(OnlyReason(ctx, {Passing(0), stage}), Catch::Contains("not a rank status"));

  ParsedReports garbage = ParseRankReports(ctx, {Passing(0).SerializeAsString(), "\xff\xff\xff"});
  REQUIRE(garbage.malformed.size() == 1);
  CHECK_THAT(garbage.malformed[0], Catch::Contains("does not parse"));
}

TEST_CASE("with report keys, only reports signed with their own rank's key are accepted") {
  VerdictContext ctx = Ctx(2);
  ctx.report_keys = {MakeReportKey(), MakeReportKey()};
  REQUIRE(ctx.report_keys[0].size() == 32);
  CHECK(ctx.report_keys[0] != ctx.report_keys[1]);
  const std::string r0 = Passing(0).SerializeAsString(), r1 = Passing(1).SerializeAsString();

  ParsedReports signed_ok = ParseRankReports(
      ctx, {SignReport(ctx.report_keys[0], r0), SignReport(ctx.report_keys[1], r1)});
  CHECK(signed_ok.malformed.empty());
  CHECK(signed_ok.Complete());

  // What a submission can write: the bare report, a report signed with a key of its own, rank
  // 1's signed report offered as rank 0's, one byte of a signed report changed, a bare MAC.
  std::string flipped = SignReport(ctx.report_keys[1], r1);
  flipped.back() ^= 1;
  const std::vector<std::optional<std::string>> forged = {
      r0,
      SignReport(MakeReportKey(), r0),
      SignReport(ctx.report_keys[1], r0),
      flipped,
      SignReport(ctx.report_keys[0], r0).substr(0, 32),
      std::string(),
  };
  for (const auto& f : forged) {
    ParsedReports p = ParseRankReports(ctx, {f, SignReport(ctx.report_keys[1], r1)});
    REQUIRE(p.malformed.size() == 1);
    CHECK_THAT(p.malformed[0], Catch::Contains("rank 0's report does not carry the harness's"));
    CHECK_FALSE(p.Complete());
  }
  ParsedReports swapped = ParseRankReports(ctx, {SignReport(ctx.report_keys[0], r0), flipped});
  REQUIRE(swapped.malformed.size() == 1);
  CHECK_THAT(swapped.malformed[0], Catch::Contains("rank 1's report"));

  CHECK(OpenSignedReport(ctx.report_keys[0], SignReport(ctx.report_keys[0], r0)) == r0);
  CHECK_FALSE(OpenSignedReport("", SignReport("", r0)));  // no key, no trust
}

TEST_CASE("missing reports leave the set incomplete without a reason, long text is cut") {
  VerdictContext ctx = Ctx(3);
  v1::RankReport chatty = Passing(1);
  chatty.set_message(std::string(1 << 20, 'x'));
  chatty.mutable_trials(0)->set_error(std::string(1 << 20, 'y'));
  ParsedReports p =
      ParseRankReports(ctx, {Passing(0).SerializeAsString(), chatty.SerializeAsString()});
  CHECK(p.malformed.empty());
  CHECK_FALSE(p.Complete());
  REQUIRE(p.reports[1]);
  CHECK(p.reports[1]->message().size() == 4096);
  CHECK(p.reports[1]->trials(0).error().size() == 4096);
  CHECK_FALSE(p.reports[2]);
}

TEST_CASE("the first failing rank decides, a mismatch attaches no log") {
  VerdictContext ctx = Ctx(3);
  v1::RankReport mismatch = Passing(1), crashed = Passing(2);
  mismatch.set_status(v1::MISMATCH);
  mismatch.set_message("rank 1 trial 0: output 0 differs");
  crashed.set_status(v1::RUNTIME_ERROR);
  crashed.set_message("rank 2: illegal address");
  v1::EvalResult r;
  Verdict v = JudgeReports(ctx, {Passing(0), mismatch, crashed}, &r);
  CHECK(v.status == v1::RUNTIME_ERROR);
  CHECK(v.log_rank == 2);
  Verdict m = JudgeReports(ctx, {Passing(0), mismatch, Passing(2)}, &r);
  CHECK(m.status == v1::MISMATCH);
  CHECK(m.log_rank == -1);
}

TEST_CASE(
    "GPU runs: hidden work counts on the judge clock, and times below the floor are rejected") {
  VerdictContext ctx = Ctx(1);
  v1::RankReport hidden = Passing(0, 10);
  hidden.set_candidate_wall_us(4 * 300);  // 300 us per iteration on the judge's clock
  for (int k = 0; k < kCandidateRounds; ++k) hidden.set_candidate_round_wall_us(k, 4 * 300);
  v1::EvalResult r;
  CHECK(JudgeReports(ctx, {hidden}, &r).status == v1::OK);
  CHECK(r.candidate().wall_per_iter_us() == 300);
  CHECK(r.speedup() == Approx(20.0 / 300));  // the events' 10 us claim nothing
  v1::RankReport fast = Passing(0, 0.5);     // below the 1 us floor on the judge's clock
  v1::EvalResult r3;
  Verdict v = JudgeReports(ctx, {fast}, &r3);
  CHECK(v.status == v1::REJECTED);
  CHECK_THAT(v.message, Catch::Contains("physical floor"));
  // One round below the floor is enough, whatever the median.
  v1::RankReport one_fast = Passing(0, 10);
  one_fast.set_candidate_round_wall_us(2, 4 * 0.5);
  v1::EvalResult r4;
  Verdict v4 = JudgeReports(ctx, {one_fast}, &r4);
  CHECK(v4.status == v1::REJECTED);
  CHECK_THAT(v4.message, Catch::Contains("its fastest round"));
  ctx.cuda = false;  // CPU runs have no physical floor
  CHECK(JudgeReports(ctx, {fast}, &r3).status == v1::OK);
}

TEST_CASE("a report must carry every round of the reference") {
  VerdictContext ctx = Ctx(1);
  v1::RankReport few = Passing(0);
  few.mutable_baseline_round_wall_us()->RemoveLast();
  CHECK_THAT(OnlyReason(ctx, {few}), Catch::Contains("rounds of the reference"));
  v1::RankReport short_series = Passing(0);
  short_series.mutable_baseline_us()->RemoveLast();
  CHECK_THAT(OnlyReason(ctx, {short_series}), Catch::Contains("timed iterations"));
}

TEST_CASE("a report must carry every round of the candidate") {
  VerdictContext ctx = Ctx(1);
  v1::RankReport few = Passing(0);
  few.mutable_candidate_round_wall_us()->RemoveLast();
  CHECK_THAT(OnlyReason(ctx, {few}), Catch::Contains("4 rounds of the candidate, not 5"));
  v1::RankReport none = Passing(0);
  none.clear_candidate_round_wall_us();
  CHECK_THAT(OnlyReason(ctx, {none}), Catch::Contains("without the candidate's rounds"));
  // A rank that failed before its rounds is judged on its status.
  none.set_status(v1::RUNTIME_ERROR);
  none.clear_candidate_us();
  ParsedReports p = ParseRankReports(ctx, Blobs({none}));
  CHECK(p.Complete());
  // Spot checks: at most every call of every round.
  v1::RankReport many = Passing(0);
  many.set_spot_checks(4 * kCandidateRounds + 1);
  CHECK_THAT(OnlyReason(ctx, {many}), Catch::Contains("spot checks"));
}

TEST_CASE(
    "spot checks per round: the spec's spread over the rounds, at least one, within the "
    "window") {
  CHECK(CheckedPerRound(3, 100, 5) == 1);
  CHECK(CheckedPerRound(5, 100, 5) == 1);
  CHECK(CheckedPerRound(6, 100, 5) == 2);
  CHECK(CheckedPerRound(20, 3, 5) == 3);
  CHECK(CheckedPerRound(0, 100, 5) == 0);
  CHECK(CheckedPerRound(3, 100, 1) == 3);  // a functional run's one round
}

TEST_CASE("the CUDA-graph baseline is the slowest rank's median replay and needs every rank") {
  VerdictContext ctx = Ctx(2);
  std::vector<v1::RankReport> reports = {Passing(0, 10), Passing(1, 10)};
  // Ctx's 4 iterations: rounds of 20-28 us are 5-7 us per call; rank 1's median is 6.
  for (double x : {20.0, 28.0, 24.0, 20.0, 22.0}) reports[0].add_baseline_graph_round_wall_us(x);
  for (double x : {24.0, 24.0, 28.0, 20.0, 20.0}) reports[1].add_baseline_graph_round_wall_us(x);
  ParsedReports p = ParseRankReports(ctx, Blobs(reports));
  REQUIRE(p.Complete());
  v1::EvalResult r;
  REQUIRE(JudgeReports(ctx, {*p.reports[0], *p.reports[1]}, &r).status == v1::OK);
  CHECK(r.baseline_graph_us() == Approx(6.0));
  CHECK(r.speedup_graph() == Approx(6.0 / 10.0));  // the candidate's 40 us windows / 4
  CHECK(r.baseline_graph_note().empty());
  // One rank could not capture its reference: no graph figure, and the reason.
  reports[1].clear_baseline_graph_round_wall_us();
  reports[1].set_baseline_graph_note("the reference cannot be captured in a CUDA graph: sync");
  v1::EvalResult none;
  REQUIRE(JudgeReports(ctx, reports, &none).status == v1::OK);
  CHECK(none.baseline_graph_us() == 0);
  CHECK(none.speedup_graph() == 0);
  CHECK_THAT(none.baseline_graph_note(), Catch::Contains("cannot be captured"));
  // Rounds are all there or none.
  reports[0].mutable_baseline_graph_round_wall_us()->RemoveLast();
  CHECK_THAT(OnlyReason(ctx, {reports[0]}), Catch::Contains("rounds of the reference's graph"));
}

TEST_CASE("the ranks' spec wait and exit come from their clock readings and the engine's") {
  const absl::Time spec = absl::FromUnixMicros(1'000'000'000);
  std::vector<v1::RankReport> reports = {Passing(0), Passing(1)};
  reports[0].set_spec_seen_unix_micros(1'000'002'000);  // 2 ms after the spec
  reports[1].set_spec_seen_unix_micros(1'000'005'000);  // the last: 5 ms
  reports[0].set_report_unix_micros(1'001'000'000);
  reports[1].set_report_unix_micros(1'000'900'000);
  v1::EvalResult r;
  (*r.mutable_stage_seconds())["verify"] = 0.2;
  (*r.mutable_stage_seconds())["benchmark"] = 0.7;
  NoteRankEnds(reports, spec, absl::FromUnixMicros(1'001'250'000), &r);
  CHECK(r.stage_seconds().at("rank_spec_wait") == Approx(0.005));
  CHECK(r.stage_seconds().at("rank_exit") == Approx(0.25));  // after the last report
  // 0.995 s from the last rank's spec to the last report, 0.9 s of it verify and benchmark.
  CHECK(r.stage_seconds().at("rank_other") == Approx(0.095));
  // Without the verify and benchmark stages (a verdict other than OK): no rank_other.
  v1::EvalResult failed;
  NoteRankEnds(reports, spec, absl::FromUnixMicros(1'001'250'000), &failed);
  CHECK(failed.stage_seconds().count("rank_exit") == 1);
  CHECK(failed.stage_seconds().count("rank_other") == 0);
  // A rank without its readings, or an exit before the report: nothing made up.
  v1::EvalResult none;
  reports[1].clear_report_unix_micros();
  NoteRankEnds(reports, spec, absl::FromUnixMicros(1'001'250'000), &none);
  CHECK(none.stage_seconds().empty());
  reports[1].set_report_unix_micros(1'000'900'000);
  NoteRankEnds(reports, spec, absl::FromUnixMicros(1'000'000'000), &none);
  CHECK(none.stage_seconds().count("rank_exit") == 0);
  CHECK(none.stage_seconds().count("rank_spec_wait") == 1);
  // A verdict given before the ranks ended: no exit, the rest as before.
  v1::EvalResult early;
  (*early.mutable_stage_seconds())["verify"] = 0.2;
  (*early.mutable_stage_seconds())["benchmark"] = 0.7;
  NoteRankEnds(reports, spec, absl::Time(), &early);
  CHECK(early.stage_seconds().count("rank_exit") == 0);
  CHECK(early.stage_seconds().at("rank_spec_wait") == Approx(0.005));
  CHECK(early.stage_seconds().at("rank_other") == Approx(0.095));
}

TEST_CASE("a report file is read only where it is a regular file of a report's size") {
  absl::StatusOr<std::string> dir = MakeTempDir("/tmp/pkb-test", "report-file-");
  REQUIRE(dir.ok());
  const std::string path = *dir + "/report.0";
  CHECK(ReadReportFile(path).status().code() == absl::StatusCode::kNotFound);
  REQUIRE(WriteFileAtomic(path, std::string("signed\0report", 13)).ok());
  absl::StatusOr<std::string> read = ReadReportFile(path);
  REQUIRE(read.ok());
  CHECK(*read == std::string("signed\0report", 13));
  // What the submission could plant in its place (the scratch folder is writable by it): a FIFO
  // that no one writes (opening it must not block), a link, a file larger than any report.
  const std::string fifo = *dir + "/report.1";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THAT(std::string(ReadReportFile(fifo).status().message()),
             Catch::Contains("not a regular file"));
  const std::string link = *dir + "/report.2";
  REQUIRE(symlink(path.c_str(), link.c_str()) == 0);
  CHECK_THAT(std::string(ReadReportFile(link).status().message()), Catch::Contains("a link"));
  const std::string big = *dir + "/report.3";
  REQUIRE(truncate(path.c_str(), 0) == 0);
  { std::ofstream(big).flush(); }
  REQUIRE(truncate(big.c_str(), kMaxReportBytes + 1) == 0);
  CHECK_THAT(std::string(ReadReportFile(big).status().message()),
             Catch::Contains("more than a report's"));
  CHECK(ReadReportFile(path)->empty());
  // The judge's own write replaces each of them, and follows no link: the link's target stays.
  for (const std::string& planted : {fifo, link, big}) {
    REQUIRE(WriteReportFile(planted, "the report").ok());
    CHECK(*ReadReportFile(planted) == "the report");
  }
  CHECK(ReadReportFile(path)->empty());
  // Nothing of its temporary files is left beside them.
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(*dir)) files += e.exists() ? 1 : 0;
  CHECK(files == 4);
  (void)RemoveTree(*dir);
}

TEST_CASE("progress lines: only what the harness writes is understood") {
  auto trial = ParseProgress(R"({"trial": 2, "ok": true})", 3);
  REQUIRE(trial);
  CHECK(trial->trial == 2);
  CHECK(trial->ok);
  CHECK(ParseProgress(R"({"stage": "BENCHMARKING"})", 3)->benchmarking);
  for (const char* bad :
       {R"({"trial": "zero"})", R"({"trial": 3})", R"({"trial": -1})", R"({"trial": 1e300})",
        R"({"trial": 1.5})", R"([1, 2])", R"({"stage": 7})", R"({"stage": "DONE"})", "not json", "",
        R"({"trial": 0)"}) {
    INFO(bad);
    CHECK_FALSE(ParseProgress(bad, 3));
  }
  CHECK_FALSE(ParseProgress(R"({"trial": 0, "ok": "yes"})", 3)->ok);
}

TEST_CASE("a rank leaving waits for its peers' reports and no longer than its limit") {
  auto dir = MakeTempDir("/tmp/pkb-test", "peer-reports-");
  REQUIRE(dir.ok());
  const std::string base = *dir + "/report";
  auto write = [&](int rank) { std::ofstream(absl::StrCat(base, ".", rank)) << "x"; };
  // Alone, or with every peer's report there: at once.
  CHECK(AwaitPeerReports(base, 0, 1, absl::ZeroDuration()));
  write(1);
  write(2);
  CHECK(AwaitPeerReports(base, 0, 3, absl::ZeroDuration()));
  // Its own report (rank 1's) is not waited for; a missing peer's (rank 3's) is, up to the limit.
  write(0);
  absl::Time t0 = absl::Now();
  CHECK_FALSE(AwaitPeerReports(base, 1, 4, absl::Milliseconds(100)));
  CHECK(absl::Now() - t0 >= absl::Milliseconds(100));
  CHECK(absl::Now() - t0 < absl::Seconds(5));
  // A report that comes while it waits ends the wait.
  std::thread late([&] {
    absl::SleepFor(absl::Milliseconds(50));
    write(3);
  });
  t0 = absl::Now();
  CHECK(AwaitPeerReports(base, 1, 4, absl::Seconds(10)));
  CHECK(absl::Now() - t0 < absl::Seconds(5));
  late.join();
  (void)RemoveTree(*dir);
}

}  // namespace
}  // namespace pkb
