// FormatReport (engine.h): the readable report pkb-eval prints.
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "worker/engine/engine.h"
#include "worker/engine/profiler.h"

namespace pkb {

std::string FormatReport(const v1::EvalResult& r) {
  std::string s = absl::StrFormat("problem %d (%s), W=%d, %s, M=%d N=%d, gpu %s\n", r.problem_id(),
                                  r.problem_slug(), r.world_size(), r.dtype(), r.m(), r.n(),
                                  r.gpu().empty() ? "-" : r.gpu());
  absl::StrAppendFormat(&s, "verdict: %s — %s\n", v1::Status_Name(r.status()), r.message());
  if (r.policy_findings_size() > 0) {
    absl::StrAppendFormat(&s, "policy: %d finding(s), not compiled (docs/security.md)\n",
                          r.policy_findings_size());
    for (const auto& d : r.policy_findings()) {
      absl::StrAppendFormat(&s, "  %s:%d: %s\n", d.file(), d.line(), d.message());
    }
  }
  if (r.has_compile()) {
    absl::StrAppendFormat(&s, "compile: %s in %.2f s%s\n", r.compile().ok() ? "ok" : "FAILED",
                          r.compile().seconds(), r.compile().cache_hit() ? " (cache hit)" : "");
    for (const auto& d : r.compile().diagnostics()) {
      absl::StrAppendFormat(&s, "  %s:%d: %s: %s\n", d.file(), d.line(), d.severity(), d.message());
    }
  }
  for (const auto& t : r.rank_trials()) {
    if (t.ok()) continue;
    absl::StrAppendFormat(&s, "rank %d trial %d:%s\n", t.rank(), t.trial(),
                          t.error().empty() ? "" : " " + t.error());
    for (const auto& c : t.outputs()) {
      if (c.ok()) continue;
      absl::StrAppendFormat(
          &s,
          "  output %d '%s': %s%d/%d bad (nan %d, unwritten %d), max abs %.4g, max rel %.4g, "
          "first bad #%d expected %.6g got %.6g (atol %g rtol %g)\n",
          c.index(), c.name(), c.problem().empty() ? "" : c.problem() + "; ", c.bad_count(),
          c.numel(), c.nan_count(), c.unwritten_count(), c.max_abs_error(), c.max_rel_error(),
          c.first_bad_index(), c.expected_at_first_bad(), c.actual_at_first_bad(), c.atol(),
          c.rtol());
    }
  }
  auto timing = [&](const char* name, const v1::Timing& t, const char* events) {
    if (t.samples() == 0) return;
    // The rounds' figures, where there were several: the median is the one above.
    std::string rounds;
    if (t.round_wall_per_iter_us_size() > 1) {
      rounds = absl::StrCat(
          "median of ", t.round_wall_per_iter_us_size(), " rounds: ",
          absl::StrJoin(t.round_wall_per_iter_us(), ", ",
                        [](std::string* out, double x) { absl::StrAppendFormat(out, "%.2f", x); }),
          " us; ");
    }
    absl::StrAppendFormat(&s,
                          "%-9s %.2f us per call on the judge's clock (%swindows of %d calls); %s "
                          "median %.2f us (p10 %.2f, p90 %.2f, mean %.2f ± %.2f, min %.2f, max "
                          "%.2f; %d samples, %d input sets)\n",
                          name, t.wall_per_iter_us(), rounds, t.iterations(), events, t.median_us(),
                          t.p10_us(), t.p90_us(), t.mean_us(), t.stddev_us(), t.min_us(),
                          t.max_us(), t.samples(), t.input_sets());
  };
  timing(r.functional() ? "candidate (functional run: not comparable)" : "candidate", r.candidate(),
         "its own events (untrusted):");
  timing("baseline", r.baseline(), "events:");
  if (r.speedup() > 0) {
    if (r.baseline_node_samples() > 0) {
      const std::string provisional =
          r.baseline_node_samples() < kSettledBaseline
              ? absl::StrCat(", fewer than ", kSettledBaseline, ": provisional (--settle-baseline)")
              : "";
      absl::StrAppendFormat(&s,
                            "speedup %.3fx (%.3fx-%.3fx) against this node's baseline of %.2f us "
                            "(median of %d measurements%s; this job's: %.3fx); PKB's events figure "
                            "%.3fx\n",
                            r.speedup(), r.speedup_low(), r.speedup_high(), r.baseline_node_us(),
                            r.baseline_node_samples(), provisional, r.speedup_in_job(),
                            r.speedup_events());
    } else {
      absl::StrAppendFormat(&s, "speedup %.3fx (%.3fx-%.3fx); PKB's events figure %.3fx\n",
                            r.speedup(), r.speedup_low(), r.speedup_high(), r.speedup_events());
    }
  }
  if (r.baseline_graph_us() > 0) {
    absl::StrAppendFormat(&s, "baseline from a CUDA graph (no host overhead) %.2f us per call%s\n",
                          r.baseline_graph_us(),
                          r.speedup_graph() > 0
                              ? absl::StrFormat(": speedup against it %.3fx", r.speedup_graph())
                              : "");
  } else if (!r.baseline_graph_note().empty() && r.baseline().samples() > 0) {
    absl::StrAppendFormat(&s, "baseline from a CUDA graph: none (%s)\n", r.baseline_graph_note());
  }
  if (r.has_roofline() && r.roofline().floor_us() > 0 && !r.functional()) {
    absl::StrAppendFormat(&s, "roofline floor %.2f us (%.1f%% reached)", r.roofline().floor_us(),
                          r.roofline().percent_of_roofline());
    if (r.roofline().algbw_gbps() > 0) {
      absl::StrAppendFormat(&s, ", algbw %.1f GB/s, busbw %.1f GB/s", r.roofline().algbw_gbps(),
                            r.roofline().busbw_gbps());
    }
    s += "\n";
  }
  s += ProfileText(r);
  absl::StrAppendFormat(&s, "total %.2f s\n", r.total_seconds());
  if (!r.failed_rank_log().empty()) {
    s += "--- log of the failing rank (tail) ---\n" + r.failed_rank_log() + "\n";
  }
  return s;
}

}  // namespace pkb
