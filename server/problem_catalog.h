// The problems the coordinator accepts, as the engine describes them (`pkb-eval --catalog`), and
// the checks a submission must pass before it is queued (CUTLASS's can_implement, one level up).
//
//   PKB_ASSIGN_OR_RETURN(ProblemCatalogIndex catalog, ProblemCatalogIndex::FromJson(json));
//   PKB_RETURN_IF_ERROR(catalog.Normalize(&request));  // precise NOT_FOUND / INVALID_ARGUMENT
//
// Immutable after construction; thread-safe to read.
#ifndef PKB_SERVER_PROBLEM_CATALOG_H_
#define PKB_SERVER_PROBLEM_CATALOG_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pkb/v1/evaluation.pb.h"
#include "pkb/v1/problem.pb.h"
#include "pkb/v1/spec.pb.h"

namespace pkb {

inline constexpr size_t kMaxSourceBytes = 1 << 20;
// Bounds of a spec's run counts (unset asks for the default: common/eval_spec.h).
inline constexpr int32_t kMaxTrials = 100;
inline constexpr int32_t kMaxWarmup = 10000;
inline constexpr int32_t kMaxIters = 10000;
inline constexpr double kMaxMinWindowMs = 1000;
inline constexpr int32_t kMaxSets = 10000;
inline constexpr double kMaxL2Multiple = 64;
inline constexpr int32_t kMaxSpotChecks = 100;
inline constexpr int32_t kMaxRunTimeoutS = 3600;
// The shape limits of a catalog that states none (the engine's rule, problems/harness/inputs.h).
inline constexpr int64_t kDefaultMaxSide = 64 * 1024;
inline constexpr int64_t kDefaultMaxArea = 64 * 1024 * 1024;

// The offset of the first byte that does not belong to a UTF-8 sequence (overlong forms and
// surrogates included), or npos.
size_t InvalidUtf8At(absl::string_view text);

class ProblemCatalogIndex {
 public:
  static absl::StatusOr<ProblemCatalogIndex> FromCatalog(v1::ProblemCatalog catalog);
  // `json` is a pkb.v1.ProblemCatalog in proto3 JSON.
  static absl::StatusOr<ProblemCatalogIndex> FromJson(const std::string& json);
  // Runs `<engine> --catalog` and parses what it prints.
  static absl::StatusOr<ProblemCatalogIndex> FromEngine(const std::string& engine_path);

  const v1::ProblemCatalog& catalog() const { return catalog_; }
  // The catalog as ListProblems serves it: without the problems' sources (GetProblem has them).
  const v1::ProblemCatalog& listing() const { return listing_; }
  // NOT_FOUND if there is no such problem.
  absl::StatusOr<const v1::ProblemSpec*> Find(int32_t id) const;
  absl::StatusOr<const v1::ProblemSpec*> FindSlug(const std::string& slug) const;

  // Checks a submission against its problem and completes its spec: the deprecated fields folded
  // in (FoldLegacyFields), gpu_class `default_gpu_class` where the spec names none (but "cpu" for
  // language "cpp"), then ApplyDefaults with the problem's defaults; the deprecated fields then
  // mirror the spec. NOT_FOUND: unknown problem. INVALID_ARGUMENT, naming the field: world size
  // not offered or not supported (with the problem's own reason), a dtype the problem does not
  // take, m or n outside the problem's limits, a run count out of bounds, a set_offset (the
  // coordinator's to choose: ask for `ranked`), functional with ranked, an empty source, one over
  // 1 MiB or one that is not UTF-8, metadata too long, a language other than "cuda" or "cpp",
  // language "cpp" on a gpu_class not "cpu".
  absl::Status Normalize(v1::SubmitRequest* request,
                         const std::string& default_gpu_class = "any") const;

 private:
  v1::ProblemCatalog catalog_;
  v1::ProblemCatalog listing_;
  std::map<int32_t, int> by_id_;  // index into catalog_.problems()
};

// The deprecated fields of a SubmitRequest (problem_id, world_size, dtype, m, n, trials, warmup,
// iters, gpu_class, ranked, language, practice, functional) moved into its spec wherever the spec
// leaves them unset (a 0 run count of before meant the default: it stays unset).
void FoldLegacyFields(v1::SubmitRequest* request);
// The deprecated fields set from the spec, for clients of before that read a Job's request.
void MirrorLegacyFields(v1::SubmitRequest* request);
// The spec of a stored request: its own, or for a record of before the spec existed, its fields
// folded into one (the stores' columns come from it).
v1::EvalSpec SpecOfRecord(const v1::SubmitRequest& request);
// A job record stored before the spec existed: its fields folded into a completed spec (a no-op
// for a record that has one). The stores call it on every job they read.
void UpgradeStoredJob(v1::Job* job);

}  // namespace pkb

#endif  // PKB_SERVER_PROBLEM_CATALOG_H_
