#include "worker/engine/verdict.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/eval_spec.h"
#include "common/files.h"
#include "common/hash.h"
#include "nlohmann/json.hpp"

namespace pkb {
namespace {

// Ceilings of one H200, measured on the device machine (docs/benchmarks.md): a device-to-device
// copy moved 4.3 TB/s counting read + write, a bf16 GEMM ran at about 790 TFLOP/s. NVLink 4 is
// 450 GB/s per direction per GPU.
constexpr double kHbmBytesPerSecond = 4.3e12;
constexpr double kFlopsPerSecond = 790e12;
constexpr double kNvlinkBytesPerSecond = 450e9;

// Bounds on what a report may hold. The harness stays far below them; they keep a forged report
// from making the engine (and the result it stores) arbitrarily large.
constexpr size_t kMaxText = 4096;
constexpr int kMaxOutputsPerTrial = 1024;
constexpr int kMaxSpotFailures = 1024;
constexpr int kMaxInputSets = 1 << 20;
constexpr double kMaxMicros = 1e12;  // eleven days in one call

void Cut(std::string* s) {
  if (s->size() > kMaxText) s->resize(kMaxText);
}

bool SaneMicros(double x) { return std::isfinite(x) && x >= 0 && x <= kMaxMicros; }

// Empty when `rep` is something the harness of rank `rank` could have written for `ctx`.
std::string Check(const VerdictContext& ctx, int rank, v1::RankReport* rep) {
  if (rep->rank() != rank) return absl::StrCat("it names rank ", rep->rank());
  switch (rep->status()) {
    case v1::OK:
    case v1::RUNTIME_ERROR:
    case v1::MISMATCH:
    case v1::REJECTED:
    case v1::INTERNAL:
      break;
    default:
      return absl::StrCat("status ", static_cast<int>(rep->status()), " is not a rank status");
  }
  Cut(rep->mutable_message());
  if (rep->device_name().size() > 256) rep->mutable_device_name()->resize(256);
  if (rep->trials_size() > ctx.trials)
    return absl::StrCat(rep->trials_size(), " trials, but ", ctx.trials, " were run");
  for (auto& t : *rep->mutable_trials()) {
    if (t.rank() != rank) return absl::StrCat("a trial names rank ", t.rank());
    if (t.trial() < 0 || t.trial() >= ctx.trials)
      return absl::StrCat("trial number ", t.trial(), " is out of range");
    if (t.outputs_size() > kMaxOutputsPerTrial) return "too many outputs in a trial";
    Cut(t.mutable_error());
    for (auto& c : *t.mutable_outputs()) {
      Cut(c.mutable_name());
      Cut(c.mutable_problem());
    }
  }
  if (rep->spot_failures_size() > kMaxSpotFailures) return "too many spot-check failures";
  for (auto& c : *rep->mutable_spot_failures()) {
    Cut(c.mutable_name());
    Cut(c.mutable_problem());
  }
  // Timings: none, or events of every marked iteration (TimerStride) of the count of calls the
  // rank says it ran (within the spec's bounds); a rank that passed must have them all.
  const bool ok = rep->status() == v1::OK;
  for (int32_t n : {rep->candidate_iters(), rep->baseline_iters()}) {
    if (n != 0 && (n < ctx.iters || n > std::max(ctx.iters, ctx.max_iters)))
      return absl::StrCat(n, " timed calls per window, outside ", ctx.iters, "..",
                          std::max(ctx.iters, ctx.max_iters));
  }
  const int candidate_iters = rep->candidate_iters();
  const int baseline_iters = rep->baseline_iters() * kBaselineRounds;
  const int candidate_marked =
      TimedSamples(rep->candidate_iters(), ctx.iters) * ctx.candidate_rounds;
  const int baseline_marked = TimedSamples(rep->baseline_iters(), ctx.iters) * kBaselineRounds;
  for (const auto* series : {&rep->candidate_us(), &rep->baseline_us()}) {
    if (series->empty()) continue;
    const int want = series == &rep->candidate_us() ? candidate_marked : baseline_marked;
    if (series->size() != want)
      return absl::StrCat(series->size(), " timed iterations with events, but ", want,
                          " were marked");
    for (double x : *series) {
      if (!SaneMicros(x)) return absl::StrCat("a timed iteration of ", x, " us");
    }
  }
  if (ok && !ctx.baseline_only && (candidate_iters == 0 || rep->candidate_us_size() == 0))
    return "a passing rank without the candidate's timings";
  if (ok && ctx.baseline && (baseline_iters == 0 || rep->baseline_us_size() == 0))
    return "a passing rank without the reference's timings";
  if (rep->candidate_round_wall_us_size() != 0 &&
      rep->candidate_round_wall_us_size() != ctx.candidate_rounds)
    return absl::StrCat(rep->candidate_round_wall_us_size(), " rounds of the candidate, not ",
                        ctx.candidate_rounds);
  if (ok && !ctx.baseline_only && rep->candidate_round_wall_us_size() != ctx.candidate_rounds)
    return "a passing rank without the candidate's rounds";
  if (rep->baseline_round_wall_us_size() != 0 &&
      rep->baseline_round_wall_us_size() != kBaselineRounds)
    return absl::StrCat(rep->baseline_round_wall_us_size(), " rounds of the reference, not ",
                        kBaselineRounds);
  if (ok && ctx.baseline && rep->baseline_round_wall_us_size() != kBaselineRounds)
    return "a passing rank without the reference's rounds";
  for (double x : {rep->candidate_wall_us(), rep->baseline_wall_us()}) {
    if (!SaneMicros(x)) return absl::StrCat("a wall-clock time of ", x, " us");
  }
  if (rep->baseline_graph_round_wall_us_size() != 0 &&
      rep->baseline_graph_round_wall_us_size() != kBaselineRounds)
    return absl::StrCat(rep->baseline_graph_round_wall_us_size(),
                        " rounds of the reference's graph, not ", kBaselineRounds);
  for (const auto* rounds : {&rep->candidate_round_wall_us(), &rep->baseline_round_wall_us(),
                             &rep->baseline_graph_round_wall_us()}) {
    for (double x : *rounds) {
      if (!SaneMicros(x)) return absl::StrCat("a wall-clock time of ", x, " us");
    }
  }
  Cut(rep->mutable_baseline_graph_note());
  for (double x :
       {rep->stage_verify_seconds(), rep->stage_benchmark_seconds(), rep->stage_device_seconds(),
        rep->stage_comms_seconds(), rep->stage_host_ready_seconds(), rep->stage_host_load_seconds(),
        rep->stage_early_seconds(), rep->bench_inputs_seconds(), rep->bench_warmup_seconds(),
        rep->bench_window_seconds(), rep->bench_checks_seconds(), rep->bench_reference_seconds(),
        rep->bench_profile_seconds(), rep->bench_quiet_seconds()}) {
    if (!SaneMicros(x)) return absl::StrCat("a stage time of ", x, " s");
  }
  if (rep->input_sets() < 0 || rep->input_sets() > kMaxInputSets)
    return absl::StrCat(rep->input_sets(), " input sets");
  if (rep->spot_checks() < 0 ||
      rep->spot_checks() > ctx.candidate_rounds * std::max(ctx.iters, candidate_iters))
    return absl::StrCat(rep->spot_checks(), " spot checks");
  return "";
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  double pos = q * (v.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(pos)), hi = static_cast<size_t>(std::ceil(pos));
  return v[lo] + (v[hi] - v[lo]) * (pos - lo);
}

// The fastest and the slowest round per call of one side (its figure where it has no rounds).
std::pair<double, double> RoundExtremes(const v1::Timing& t) {
  double lo = t.wall_per_iter_us(), hi = lo;
  for (double x : t.round_wall_per_iter_us()) {
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  return {lo, hi};
}

}  // namespace

int CheckedPerRound(int spot_checks, int calls, int rounds) {
  if (spot_checks <= 0 || calls <= 0 || rounds <= 0) return 0;
  return std::min(calls, (spot_checks + rounds - 1) / rounds);
}

bool ParsedReports::Complete() const {
  return std::all_of(reports.begin(), reports.end(), [](const auto& r) { return r.has_value(); });
}

std::string MakeReportKey() { return RandomBytes(32); }

std::string SignReport(std::string_view key, std::string_view report) {
  return HmacSha256(key, report) + std::string(report);
}

std::optional<std::string> OpenSignedReport(std::string_view key, std::string_view signed_report) {
  constexpr size_t kMac = 32;
  if (key.empty() || signed_report.size() < kMac) return std::nullopt;
  std::string_view body = signed_report.substr(kMac);
  if (!ConstantTimeEqual(signed_report.substr(0, kMac), HmacSha256(key, body))) {
    return std::nullopt;
  }
  return std::string(body);
}

ParsedReports ParseRankReports(const VerdictContext& ctx,
                               const std::vector<std::optional<std::string>>& blobs) {
  ParsedReports out;
  out.reports.resize(ctx.world);
  for (int rank = 0; rank < ctx.world; ++rank) {
    if (rank >= static_cast<int>(blobs.size()) || !blobs[rank]) continue;
    std::optional<std::string> body = *blobs[rank];
    if (!ctx.report_keys.empty()) {
      body = rank < static_cast<int>(ctx.report_keys.size())
                 ? OpenSignedReport(ctx.report_keys[rank], *blobs[rank])
                 : std::nullopt;
      if (!body) {
        out.malformed.push_back(
            absl::StrCat("rank ", rank, "'s report does not carry the harness's signature"));
        continue;
      }
    }
    v1::RankReport rep;
    std::string why =
        rep.ParseFromString(*body) ? Check(ctx, rank, &rep) : std::string("it does not parse");
    if (why.empty()) {
      out.reports[rank] = std::move(rep);
    } else {
      out.malformed.push_back(absl::StrCat("rank ", rank, "'s report: ", why));
    }
  }
  return out;
}

std::optional<Progress> ParseProgress(std::string_view line, int trials) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  Progress p;
  auto trial = j.find("trial");
  if (trial != j.end()) {
    if (!trial->is_number_integer()) return std::nullopt;
    int64_t t = trial->get<int64_t>();
    if (t < 0 || t >= trials) return std::nullopt;
    p.trial = static_cast<int>(t);
    auto ok = j.find("ok");
    p.ok = ok != j.end() && ok->is_boolean() && ok->get<bool>();
    return p;
  }
  auto stage = j.find("stage");
  if (stage != j.end() && stage->is_string() && stage->get<std::string>() == "BENCHMARKING") {
    p.benchmarking = true;
    return p;
  }
  return std::nullopt;
}

v1::Timing SummarizeTiming(const std::vector<std::vector<double>>& per_rank,
                           const std::vector<std::vector<double>>& wall_us, int iters, int sets,
                           int spot_checks) {
  v1::Timing t;
  if (per_rank.empty() || per_rank[0].empty()) return t;
  size_t n = per_rank[0].size();
  std::vector<double> slowest(n, 0);
  for (const auto& r : per_rank) {
    for (size_t i = 0; i < n && i < r.size(); ++i) slowest[i] = std::max(slowest[i], r[i]);
    t.add_per_rank_median_us(Percentile(r, 0.5));
  }
  double mean = std::accumulate(slowest.begin(), slowest.end(), 0.0) / n;
  double var = 0;
  for (double x : slowest) var += (x - mean) * (x - mean);
  t.set_median_us(Percentile(slowest, 0.5));
  t.set_mean_us(mean);
  t.set_stddev_us(n > 1 ? std::sqrt(var / (n - 1)) : 0);
  t.set_p10_us(Percentile(slowest, 0.1));
  t.set_p90_us(Percentile(slowest, 0.9));
  t.set_min_us(*std::min_element(slowest.begin(), slowest.end()));
  t.set_max_us(*std::max_element(slowest.begin(), slowest.end()));
  t.set_samples(static_cast<int>(n));
  // Window k's time is the slowest rank's; the figure is the median window.
  size_t windows = 0;
  for (const auto& w : wall_us) windows = std::max(windows, w.size());
  std::vector<double> per_window(windows, 0);
  for (const auto& w : wall_us) {
    for (size_t k = 0; k < w.size(); ++k) per_window[k] = std::max(per_window[k], w[k]);
  }
  const double per_iter = 1.0 / std::max(1, iters);
  t.set_iterations(iters);
  if (windows > 1) {
    for (double x : per_window) t.add_round_wall_per_iter_us(x * per_iter);
  }
  t.set_wall_per_iter_us(Percentile(per_window, 0.5) * per_iter);
  t.set_input_sets(sets);
  t.set_spot_checks(spot_checks);
  return t;
}

void ApplyNodeBaseline(const std::vector<double>& node_us, v1::EvalResult* r) {
  const double cand = r->candidate().wall_per_iter_us();
  if (node_us.empty() || cand <= 0) return;
  const double base = Percentile(node_us, 0.5);
  r->set_baseline_node_us(base);
  r->set_baseline_node_samples(static_cast<int>(node_us.size()));
  r->set_speedup_in_job(r->speedup());
  r->set_speedup(base / cand);
  double lo, hi;
  if (node_us.size() >= 5) {
    lo = Percentile(node_us, 0.1);
    hi = Percentile(node_us, 0.9);
  } else {
    lo = *std::min_element(node_us.begin(), node_us.end());
    hi = *std::max_element(node_us.begin(), node_us.end());
    for (double x : r->baseline().round_wall_per_iter_us()) {
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
  }
  const auto [fast, slow] = RoundExtremes(r->candidate());
  r->set_speedup_low(lo / slow);
  r->set_speedup_high(hi / fast);
}

bool AwaitPeerReports(const std::string& report_base, int rank, int world, absl::Duration limit) {
  const absl::Time end = absl::Now() + limit;
  for (int r = 0; r < world; ++r) {
    if (r == rank) continue;
    const double left_s = std::max(0.0, absl::ToDoubleSeconds(end - absl::Now()));
    if (!AwaitFile(absl::StrCat(report_base, ".", r), left_s, "a peer's report").ok()) return false;
  }
  return true;
}

absl::StatusOr<std::string> ReadReportFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    if (error == ENOENT) return absl::NotFoundError(absl::StrCat("no report at ", path));
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open ", path, ": ", strerror(error),
                     error == ELOOP ? " (a link where the report belongs)" : ""));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a regular file"));
  }
  if (st.st_size > kMaxReportBytes) {
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat(
        path, " holds ", st.st_size, " bytes, more than a report's ", kMaxReportBytes));
  }
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t have = 0;
  while (have < out.size()) {
    const ssize_t n = read(fd, out.data() + have, out.size() - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    have += static_cast<size_t>(n);
  }
  close(fd);
  out.resize(have);
  return out;
}

absl::Status WriteReportFile(const std::string& path, const std::string& bytes) {
  std::string tmp = path + ".XXXXXX";
  const int fd = mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot create a file beside ", path, ": ", strerror(errno)));
  }
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  // Readable by the engine, which may run as another uid than the sandbox's ranks.
  const bool ok = done == bytes.size() && fchmod(fd, 0644) == 0;
  const int error = errno;
  close(fd);
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
    const int why = ok ? errno : error;
    unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat("cannot write ", path, ": ", strerror(why)));
  }
  return absl::OkStatus();
}

void NoteRankEnds(const std::vector<v1::RankReport>& reports, absl::Time spec_written,
                  absl::Time ranks_ended, v1::EvalResult* result) {
  int64_t seen = 0, reported = 0;
  for (const auto& rep : reports) {
    if (rep.spec_seen_unix_micros() <= 0 || rep.report_unix_micros() <= 0) return;
    seen = std::max(seen, rep.spec_seen_unix_micros());
    reported = std::max(reported, rep.report_unix_micros());
  }
  if (reports.empty() || spec_written == absl::Time()) return;
  const double wait_s = (seen - absl::ToUnixMicros(spec_written)) / 1e6;
  auto& stages = *result->mutable_stage_seconds();
  // A rank started after the spec was written has it at once (its wait is then its own start).
  if (wait_s >= 0 && wait_s < 3600) stages["rank_spec_wait"] = wait_s;
  if (ranks_ended != absl::Time()) {
    const double exit_s = (absl::ToUnixMicros(ranks_ended) - reported) / 1e6;
    if (exit_s >= 0 && exit_s < 3600) stages["rank_exit"] = exit_s;
  }
  // The ranks' time from the spec to their reports outside verify and benchmark: their set-up
  // for the job (the host's init, communicators, the wait for an overlapped compile, the
  // candidate's load) and the report's writing. Only where both stages were judged (an OK
  // verdict): otherwise it would be the whole time.
  auto verify = stages.find("verify"), bench = stages.find("benchmark");
  if (verify == stages.end() || bench == stages.end()) return;
  const double judged_s = (reported - seen) / 1e6;
  const double other_s = judged_s - verify->second - bench->second;
  if (judged_s >= 0 && judged_s < 3600 && other_s >= 0) stages["rank_other"] = other_s;
}

void CollectRankTrials(const ParsedReports& parsed, v1::EvalResult* result) {
  for (const auto& rep : parsed.reports) {
    if (!rep) continue;
    for (const auto& t : rep->trials()) {
      if (!t.ok() || t.outputs_size() > 0) *result->add_rank_trials() = t;
    }
  }
}

Verdict JudgeReports(const VerdictContext& ctx, const std::vector<v1::RankReport>& reports,
                     v1::EvalResult* r) {
  if (reports.empty()) return {v1::INTERNAL, "no rank reports to judge"};
  // The first non-OK rank decides, a mismatch report winning over a bystander's.
  for (v1::Status s : {v1::INTERNAL, v1::REJECTED, v1::RUNTIME_ERROR, v1::MISMATCH}) {
    for (const auto& rep : reports) {
      if (rep.status() == s) {
        r->set_gpu(rep.device_name());
        return {s, rep.message(), s == v1::MISMATCH ? -1 : rep.rank()};
      }
    }
  }
  r->set_gpu(reports[0].device_name());
  double verify_s = 0, bench_s = 0, device_s = 0, comms_s = 0, ready_s = 0, load_s = 0, early_s = 0;
  for (const auto& rep : reports) {
    verify_s = std::max(verify_s, rep.stage_verify_seconds());
    bench_s = std::max(bench_s, rep.stage_benchmark_seconds());
    device_s = std::max(device_s, rep.stage_device_seconds());
    comms_s = std::max(comms_s, rep.stage_comms_seconds());
    ready_s = std::max(ready_s, rep.stage_host_ready_seconds());
    load_s = std::max(load_s, rep.stage_host_load_seconds());
    early_s = std::max(early_s, rep.stage_early_seconds());
  }
  auto& stages = *r->mutable_stage_seconds();
  stages["rank_device"] = device_s;
  stages["rank_comms"] = comms_s;
  stages["host_ready"] = ready_s;
  stages["host_load"] = load_s;
  if (early_s > 0) stages["rank_early"] = early_s;  // before the job, so no part of its time
  // The benchmark in parts, each the slowest rank's.
  const std::pair<const char*, double (v1::RankReport::*)() const> parts[] = {
      {"bench_inputs", &v1::RankReport::bench_inputs_seconds},
      {"bench_warmup", &v1::RankReport::bench_warmup_seconds},
      {"bench_window", &v1::RankReport::bench_window_seconds},
      {"bench_checks", &v1::RankReport::bench_checks_seconds},
      {"bench_reference", &v1::RankReport::bench_reference_seconds},
      {"bench_profile", &v1::RankReport::bench_profile_seconds},
      {"bench_quiet", &v1::RankReport::bench_quiet_seconds}};
  for (const auto& [name, field] : parts) {
    double slowest = 0;
    for (const auto& rep : reports) slowest = std::max(slowest, (rep.*field)());
    if (slowest > 0) stages[name] = slowest;
  }
  stages["verify"] = verify_s;
  stages["benchmark"] = bench_s;

  // Per-iteration series are compared index by index across ranks: they ran the same counts.
  for (const auto& rep : reports) {
    if (rep.candidate_iters() != reports[0].candidate_iters() ||
        rep.baseline_iters() != reports[0].baseline_iters()) {
      return {v1::INTERNAL,
              absl::StrCat("the ranks timed windows of different lengths (rank ", rep.rank(), ": ",
                           rep.candidate_iters(), " and ", rep.baseline_iters(), " calls, rank ",
                           reports[0].rank(), ": ", reports[0].candidate_iters(), " and ",
                           reports[0].baseline_iters(), ")")};
    }
  }
  const int cand_iters = reports[0].candidate_iters(), base_iters = reports[0].baseline_iters();
  std::vector<std::vector<double>> cand, base, cand_wall, base_wall;
  for (const auto& rep : reports) {
    cand.emplace_back(rep.candidate_us().begin(), rep.candidate_us().end());
    base.emplace_back(rep.baseline_us().begin(), rep.baseline_us().end());
    cand_wall.emplace_back(rep.candidate_round_wall_us().begin(),
                           rep.candidate_round_wall_us().end());
    base_wall.emplace_back(rep.baseline_round_wall_us().begin(),
                           rep.baseline_round_wall_us().end());
  }
  *r->mutable_candidate() = SummarizeTiming(cand, cand_wall, cand_iters, reports[0].input_sets(),
                                            reports[0].spot_checks());
  if (ctx.baseline)
    *r->mutable_baseline() =
        SummarizeTiming(base, base_wall, base_iters, reports[0].input_sets(), 0);
  // The reference replayed from a CUDA graph, where every rank's could be captured: the slowest
  // rank's median round.
  double graph_us = 0;
  std::string graph_note;
  for (const auto& rep : reports) {
    if (rep.baseline_graph_round_wall_us_size() == 0) {
      graph_us = -1;
      if (graph_note.empty()) graph_note = rep.baseline_graph_note();
      continue;
    }
    if (graph_us < 0) continue;
    std::vector<double> rounds(rep.baseline_graph_round_wall_us().begin(),
                               rep.baseline_graph_round_wall_us().end());
    graph_us = std::max(graph_us, Percentile(rounds, 0.5) / ctx.iters);
  }
  for (const auto& rep : reports) {
    if (rep.has_profile()) *r->add_profiles() = rep.profile();
  }
  if (ctx.baseline && graph_us > 0) {
    r->set_baseline_graph_us(graph_us);
  } else if (ctx.baseline) {
    r->set_baseline_graph_note(graph_note.empty() ? "not measured on this device" : graph_note);
  }
  if (ctx.baseline_only) {
    return {v1::OK,
            absl::StrFormat("reference alone: %.2f us per call on %d rank(s) (the "
                            "judge's clock; events' median %.2f us; from a CUDA graph %s)",
                            r->baseline().wall_per_iter_us(), ctx.world, r->baseline().median_us(),
                            r->baseline_graph_us() > 0
                                ? absl::StrFormat("%.2f us", r->baseline_graph_us())
                                : "not measured")};
  }
  // The score: both sides on the judges' clocks. The candidate's events are claims of its own
  // process (it can rewrite the timer functions it loaded), kept only as PKB's figure.
  const v1::Timing& c = r->candidate();
  const v1::Timing& b = r->baseline();
  if (c.wall_per_iter_us() > 0 && b.wall_per_iter_us() > 0) {
    r->set_speedup(b.wall_per_iter_us() / c.wall_per_iter_us());
    const auto [lo, hi] = RoundExtremes(b);
    const auto [fast, slow] = RoundExtremes(c);
    r->set_speedup_low(lo / slow);
    r->set_speedup_high(hi / fast);
  }
  if (c.median_us() > 0 && b.median_us() > 0) r->set_speedup_events(b.median_us() / c.median_us());
  if (r->baseline_graph_us() > 0 && c.wall_per_iter_us() > 0)
    r->set_speedup_graph(r->baseline_graph_us() / c.wall_per_iter_us());
  v1::Roofline* rr = r->mutable_roofline();
  rr->set_nvlink_bytes(ctx.nvlink_bytes);
  rr->set_hbm_bytes(ctx.hbm_bytes);
  rr->set_flops(ctx.flops);
  double floor_s = std::max({ctx.nvlink_bytes / kNvlinkBytesPerSecond,
                             ctx.hbm_bytes / kHbmBytesPerSecond, ctx.flops / kFlopsPerSecond});
  rr->set_floor_us(floor_s * 1e6);
  const double med_s = c.wall_per_iter_us() * 1e-6;
  if (med_s > 0) {
    rr->set_percent_of_roofline(100.0 * floor_s / med_s);
    if (ctx.collective_bytes > 0) {
      rr->set_algbw_gbps(ctx.collective_bytes / med_s / 1e9);
      rr->set_busbw_gbps(rr->algbw_gbps() * ctx.busbw_factor);
    }
  }
  // No check ties the events to the wall clock any more: they no longer enter the score. Work
  // hidden on other streams or threads is on the judge's clock as long as it ends before the
  // host answers; if it ends later, the outputs the judge copies at the answer are not there.
  // Each round is a measurement: the fastest must not be below the floor either (a round of
  // skipped work the median would hide).
  const double fastest_s = RoundExtremes(c).first * 1e-6;
  if (ctx.cuda && floor_s > 0 && fastest_s > 0 && fastest_s < 0.8 * floor_s) {
    return {v1::REJECTED,
            absl::StrFormat("the measured time (%.2f us%s) is below the physical floor (%.2f us) "
                            "of this problem",
                            fastest_s * 1e6, fastest_s < med_s ? ", its fastest round" : "",
                            floor_s * 1e6)};
  }
  return {v1::OK, absl::StrFormat("correct on %d rank(s) in %d trial(s); speedup %.3fx", ctx.world,
                                  ctx.trials, r->speedup())};
}

}  // namespace pkb
