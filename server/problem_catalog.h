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

namespace pkb {

inline constexpr size_t kMaxSourceBytes = 1 << 20;
// Bounds of a request's run counts (0 asks for the engine's default).
inline constexpr int32_t kMaxTrials = 100;
inline constexpr int32_t kMaxWarmup = 10000;
inline constexpr int32_t kMaxIters = 10000;
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
  // NOT_FOUND if there is no such problem.
  absl::StatusOr<const v1::ProblemSpec*> Find(int32_t id) const;
  absl::StatusOr<const v1::ProblemSpec*> FindSlug(const std::string& slug) const;

  // Checks a submission against its problem and fills in the defaults (dtype, m, n, language
  // "cuda"; gpu_class "cpu" for language "cpp"). NOT_FOUND: unknown problem. INVALID_ARGUMENT,
  // naming the field: world size not offered or not supported (with the problem's own reason), a
  // dtype the problem does not take, m or n outside the problem's limits, trials, warmup or iters
  // out of bounds, an empty source, one over 1 MiB or one that is not UTF-8, metadata too long, a
  // language other than "cuda" or "cpp", language "cpp" on a gpu_class not "cpu".
  absl::Status Normalize(v1::SubmitRequest* request) const;

 private:
  v1::ProblemCatalog catalog_;
  std::map<int32_t, int> by_id_;  // index into catalog_.problems()
};

// The job key: SHA-256 over everything that decides the result (see pkb.v1.Job.job_key).
// `request` must be normalised and its gpu_class resolved; `set_offset` is the input seed offset
// the engine will run with (0: public seeds; the secret one for a ranked submission).
std::string JobKey(const v1::SubmitRequest& request, int32_t problem_version,
                   const std::string& harness_version, int64_t set_offset = 0);

}  // namespace pkb

#endif  // PKB_SERVER_PROBLEM_CATALOG_H_
