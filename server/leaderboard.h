// The leaderboard's arithmetic over the job store: boards (best result per user or model), the
// suite's fast_p and geometric-mean speedup per model, and one submission's history. The rules
// (what ranks, what disqualifies a source, how a task without a correct result counts) are the
// contract in proto/pkb/v1/leaderboard.proto; the gRPC service (leaderboard_service.h) and the
// web leaderboard (http_frontend.h) both answer from here.
//
//   PKB_ASSIGN_OR_RETURN(v1::LeaderboardAnswer a, QueryLeaderboard(store, &catalog, query));
//
// Stateless: every call reads the store. Thread-safe as the store is.
#ifndef PKB_SERVER_LEADERBOARD_H_
#define PKB_SERVER_LEADERBOARD_H_

#include <functional>
#include <set>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "pkb/v1/leaderboard.pb.h"
#include "server/job_store.h"
#include "server/problem_catalog.h"

namespace pkb {

// (problem id, source sha256) of every source disqualified on its problem.
using DisqualifiedSet = std::set<std::pair<int32_t, std::string>>;
absl::StatusOr<DisqualifiedSet> FindDisqualified(JobStore* store, int32_t problem_id);

// The confirmation state of `job` and the figure its boards use, from its confirmation run and
// its shape runs (job.confirmation_job_id, job.shape_job_ids). `find` returns the job of an id,
// or null when the store has none.
using JobLookup = std::function<const v1::Job*(const std::string& job_id)>;
v1::Confirmation ConfirmationOf(const v1::Job& job, const JobLookup& find);
// The same for a job without shape runs: `confirmation` is the job named by
// job.confirmation_job_id, or null when the store has none.
v1::Confirmation ConfirmationOf(const v1::Job& job, const v1::Job* confirmation);

// Why `job` does not rank; empty when it ranks. `disqualified` covers the job's problem;
// `confirmation` is ConfirmationOf(job, ...).
std::string NotRankedReason(const v1::Job& job, const DisqualifiedSet& disqualified,
                            const v1::Confirmation& confirmation);

// `catalog` may be null; it fills problem slugs that results lack, and defines the suite.
absl::StatusOr<v1::LeaderboardAnswer> QueryLeaderboard(JobStore* store,
                                                       const ProblemCatalogIndex* catalog,
                                                       const v1::LeaderboardQuery& query);
absl::StatusOr<v1::SuiteAnswer> QuerySuite(JobStore* store, const ProblemCatalogIndex& catalog,
                                           const v1::SuiteQuery& query);
absl::StatusOr<v1::Submission> GetSubmission(JobStore* store, const std::string& job_id,
                                             bool include_source);
absl::StatusOr<v1::ListSubmissionsAnswer> ListSubmissions(JobStore* store,
                                                          const ProblemCatalogIndex* catalog,
                                                          const v1::ListSubmissionsRequest& req);

// One summary row of a job (ListSubmissions, exports).
v1::SubmissionSummary Summarize(const v1::Job& job, const ProblemCatalogIndex* catalog);

}  // namespace pkb

#endif  // PKB_SERVER_LEADERBOARD_H_
