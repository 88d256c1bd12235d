// The job spec (proto/pkb/v1/spec.proto): its defaults, its key and its file form. The coordinator,
// pkb-eval and pkb-rank all complete a spec with ApplyDefaults, so a default is declared here and
// nowhere else, and the coordinator's job key and a standalone pkb-eval's are one function of one
// completed spec.
//
//   v1::EvalSpec spec;  spec.set_problem_id(1);  spec.set_world_size(4);
//   ApplyDefaults(&spec);                       // trials 5, warm-up 500, ... gpu_class "any"
//   std::string key = JobKey(spec, source, problem_version, HarnessVersion());
//   PKB_RETURN_IF_ERROR(WriteSpecFile(dir + "/spec.binpb", spec));
#ifndef PKB_COMMON_EVAL_SPEC_H_
#define PKB_COMMON_EVAL_SPEC_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pkb/v1/problem.pb.h"
#include "pkb/v1/spec.pb.h"

namespace pkb {

// Fills every unset field of `spec` with its default: dtype, m and n from `problem` where it
// states them (the catalog's default_*; without a problem, the engine's own), the run counts,
// gpu_class "any" ("cpu" for language "cpp"), language "cuda"; dtype aliases ("bf16") become their
// canonical names. Idempotent. It never checks bounds: the coordinator and the engine do.
void ApplyDefaults(v1::EvalSpec* spec, const v1::ProblemSpec* problem = nullptr);

// The canonical name of a run dtype: "bf16" -> "bfloat16", "fp32" -> "float32", ...; other names
// unchanged.
std::string CanonicalDtype(const std::string& name);

// The job key: SHA-256 over the completed spec's keyed fields (spec.proto says which), the
// source, the problem's version and the harness version. `spec` must have been through
// ApplyDefaults, so that a default left unset and the same value given explicitly key alike.
std::string JobKey(const v1::EvalSpec& spec, absl::string_view source, int32_t problem_version,
                   absl::string_view harness_version);

// The most timed calls one window of either side may run where min_window_ms asks for more than
// `iters` (the timers and per-call records grow with it).
inline constexpr int kMaxTimedIterations = 10000;

// The most timed calls per window a completed `spec` allows: `iters` when min_window_ms is 0,
// else the larger of `iters` and kMaxTimedIterations. A window runs between `iters` and this.
int TimedIterationsCap(const v1::EvalSpec& spec);

// Which timed calls of a window carry device events (two records each, on the timing side's
// stream): calls 0, stride, 2 * stride, ... with stride = ceil(calls / iters), so that about
// `iters` calls are marked however long the window, and the records' host cost weighs on a long
// window's calls by 1/stride only. The window's figure is the judge's clock over all its calls;
// the events are informative (the candidate's are claims). TimedSamples is how many are marked.
// MarkedCalls is how many of `calls` carry them for a given stride (below 1: every call).
int TimerStride(int calls, int iters);
int TimedSamples(int calls, int iters);
int MarkedCalls(int calls, int stride);

// A spec file. The form follows the extension: ".json" (proto3 JSON), ".txtpb", ".textproto" or
// ".pbtxt" (text format), anything else binary (".binpb").
absl::StatusOr<v1::EvalSpec> ReadSpecFile(const std::string& path);
absl::Status WriteSpecFile(const std::string& path, const v1::EvalSpec& spec);

}  // namespace pkb

#endif  // PKB_COMMON_EVAL_SPEC_H_
