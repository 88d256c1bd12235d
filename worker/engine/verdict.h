// From what the rank processes wrote to the verdict of one evaluation.
//
// The rank processes run the submission in their own address space, so everything they hand
// the engine — the report files and the progress lines on rank 0's stdout — may have been
// written by the submission. Both are parsed here as untrusted input: every field is checked
// against the job's own parameters, a malformed report makes the verdict REJECTED instead of
// crashing or misleading the engine, and nothing here reads past what was checked. libFuzzer
// drives both entry points (tests/fuzz/engine_reports_fuzz.cc).
//
//   VerdictContext ctx{.world = 2, .trials = 5, .iters = 100, ...};
//   ParsedReports parsed = ParseRankReports(ctx, blobs);   // one blob per rank, or nullopt
//   if (parsed.malformed.empty() && parsed.Complete()) {
//     Verdict v = JudgeReports(ctx, parsed.reports, &result);
//   }
//
// No libtorch: the problem's roofline comes in as numbers.
#ifndef PKB_WORKER_ENGINE_VERDICT_H_
#define PKB_WORKER_ENGINE_VERDICT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pkb/v1/result.pb.h"

namespace pkb {

// The reference is timed in this many windows (rounds) of the job's timed iterations; their median
// is the baseline, their spread the speedup's interval.
inline constexpr int kBaselineRounds = 5;
// The candidate is timed in this many rounds too, each on input sets of its own with spot checks
// of its own (CheckedPerRound); the median round is its figure. A functional run (ranks sharing
// a GPU: its timings are compared with nothing) has one.
inline constexpr int kCandidateRounds = 5;
inline int CandidateRounds(bool functional) { return functional ? 1 : kCandidateRounds; }

// Timed iterations of each kind (copied by the host, checked in place) picked in each of the
// candidate's `rounds`: the spec's spot_checks spread over the rounds, at least one each where
// there are any, and no more than the window's calls.
int CheckedPerRound(int spot_checks, int calls, int rounds);

// The job's parameters that a report must agree with, and the problem's roofline.
struct VerdictContext {
  int world = 1;
  int trials = 1;
  int iters = 1;               // the spec's timed calls per window: the least a window may run
  int max_iters = 1;           // the most (TimedIterationsCap); each report says how many it ran
  bool baseline = true;        // the reference was timed too
  bool baseline_only = false;  // no candidate
  int candidate_rounds = kCandidateRounds;  // CandidateRounds
  bool cuda = true;                         // GPU run: the physical-floor check applies
  double nvlink_bytes = 0;                  // per rank, from Problem::GetRoofline
  double hbm_bytes = 0;
  double flops = 0;
  double collective_bytes = 0;
  double busbw_factor = 0;
  // One key per rank (from MakeReportKey), or none to accept unsigned reports (the fuzzer).
  std::vector<std::string> report_keys;
};

// The verdict channel's signature. Each rank's harness holds a key of its own, handed to it by
// the engine in a file it deletes before the submission's process starts; a report is the
// HMAC-SHA-256 of its bytes under that key, then the bytes. A report the submission wrote or
// altered does not verify, whatever it says.
std::string MakeReportKey();  // 32 random bytes
std::string SignReport(std::string_view key, std::string_view report);
// The report's bytes, or nullopt when the signature does not verify.
std::optional<std::string> OpenSignedReport(std::string_view key, std::string_view signed_report);

// Waits, up to `limit`, for the other ranks' reports (`report_base`.<rank>, rank < world) to
// exist: each writes its own once its judging, and so its part of every collective, is over. A
// rank that leaves without releasing its device (pkb-rank) waits for this first, so that no
// peer's last collective meets a context being torn down. False when one did not come in time.
bool AwaitPeerReports(const std::string& report_base, int rank, int world, absl::Duration limit);

// Reads one rank's report file (`report_base`.<rank>). The file is writable by the submission
// (docs/security.md), so only a regular file of at most kMaxReportBytes is read, opened without
// following a link and without blocking: a FIFO, a link or a device planted in its place is an
// error (the caller takes it for a malformed report), never a hang. NotFound when there is none.
inline constexpr int64_t kMaxReportBytes = 64 << 20;
absl::StatusOr<std::string> ReadReportFile(const std::string& path);

// Writes a rank's report file whole: into a fresh file of its own beside it (created, never
// opened where something stands already), then renamed into place, replacing whatever the
// submission left under that name without following it. The engine may take the verdict as soon
// as every rank's file is there (Evaluation::SettleEarly), so none is ever seen half written.
absl::Status WriteReportFile(const std::string& path, const std::string& bytes);

struct ParsedReports {
  std::vector<std::optional<v1::RankReport>> reports;  // by rank; nullopt: missing or malformed
  std::vector<std::string> malformed;                  // one reason per malformed report
  bool Complete() const;                               // every rank has a valid report
};

// Parses and checks one report per rank (nullopt where the rank wrote none); with report keys,
// each must carry its rank's signature. Oversized strings
// are cut rather than rejected; anything the harness never writes (another rank's number,
// more trials than were run, a timing count other than the iteration count, a negative or
// non-finite time) marks the report malformed.
ParsedReports ParseRankReports(const VerdictContext& ctx,
                               const std::vector<std::optional<std::string>>& blobs);

// One progress line of rank 0 ("PKB-PROGRESS " already stripped).
struct Progress {
  int trial = -1;  // a trial finished; -1 for a stage announcement
  bool ok = false;
  bool benchmarking = false;
};
// nullopt for anything that is not a line the harness writes (they are then ignored).
std::optional<Progress> ParseProgress(std::string_view line, int trials);

struct Verdict {
  v1::Status status = v1::OK;
  std::string message;
  int log_rank = -1;  // whose log to attach to the result, -1 for none
};

// Judges a complete set of valid reports (ParsedReports::Complete): the first non-OK rank
// decides, then the timing summary, speedup and roofline go into `result`, and the physical-floor
// check runs. The speedup rests on the judges' wall clocks only (the candidate's events are its
// own process's claims).
Verdict JudgeReports(const VerdictContext& ctx, const std::vector<v1::RankReport>& reports,
                     v1::EvalResult* result);

// Sets the speedup of an OK result against this node's newest measurements of the baseline
// (BaselineStore; this job's last): their median, its interval from their spread, and the in-job
// speedup beside it.
void ApplyNodeBaseline(const std::vector<double>& node_us, v1::EvalResult* result);

// Where the ranks' time went outside their own stages, from their reports' clock readings
// (RankReport.spec_seen_unix_micros, report_unix_micros) and the engine's: stage_seconds.
// rank_spec_wait, from the spec written to the last rank having it, and rank_exit, from the
// last report written to every rank process gone (not when `ranks_ended` is absl::Time(): a
// verdict given before they ended); rank_other, from the last rank having the spec to the last
// report, less the verify and benchmark stages already in `result` (the ranks' set-up for the
// job, a wait for an overlapped compile among it, and their reports), only where both are there
// (JudgeReports sets them for an OK verdict). Readings that make no sense are left out.
void NoteRankEnds(const std::vector<v1::RankReport>& reports, absl::Time spec_written,
                  absl::Time ranks_ended, v1::EvalResult* result);

// Every rank's trials that failed or carry output details, for the result.
void CollectRankTrials(const ParsedReports& parsed, v1::EvalResult* result);

// Per-iteration slowest-rank times and their distribution, and the slowest rank's wall clock per
// iteration: `wall_us` holds each rank's windows (its rounds for the candidate, kBaselineRounds
// for the baseline) of `iters` iterations; the median window is the figure
// (exposed for tests).
v1::Timing SummarizeTiming(const std::vector<std::vector<double>>& per_rank,
                           const std::vector<std::vector<double>>& wall_us, int iters, int sets,
                           int spot_checks);

}  // namespace pkb

#endif  // PKB_WORKER_ENGINE_VERDICT_H_
