// pkb.v1.Leaderboard on the gRPC callback API: role checks, then the arithmetic in leaderboard.h.
// Researcher and admin tokens read everything; agent tokens read their own submissions only.
#ifndef PKB_SERVER_LEADERBOARD_SERVICE_H_
#define PKB_SERVER_LEADERBOARD_SERVICE_H_

#include "pkb/v1/leaderboard.grpc.pb.h"
#include "server/auth.h"
#include "server/job_store.h"
#include "server/leaderboard.h"
#include "server/problem_catalog.h"

namespace pkb {

class LeaderboardService final : public v1::Leaderboard::CallbackService {
 public:
  // All three must outlive the service.
  LeaderboardService(JobStore* store, const ProblemCatalogIndex* catalog, TokenAuth* auth)
      : store_(store), catalog_(catalog), auth_(auth) {}
  grpc::ServerUnaryReactor* Query(grpc::CallbackServerContext* ctx,
                                  const v1::LeaderboardQuery* request,
                                  v1::LeaderboardAnswer* response) override;
  grpc::ServerUnaryReactor* Suite(grpc::CallbackServerContext* ctx, const v1::SuiteQuery* request,
                                  v1::SuiteAnswer* response) override;
  grpc::ServerUnaryReactor* GetSubmission(grpc::CallbackServerContext* ctx,
                                          const v1::GetSubmissionRequest* request,
                                          v1::Submission* response) override;
  grpc::ServerUnaryReactor* ListSubmissions(grpc::CallbackServerContext* ctx,
                                            const v1::ListSubmissionsRequest* request,
                                            v1::ListSubmissionsAnswer* response) override;

 private:
  JobStore* const store_;
  const ProblemCatalogIndex* const catalog_;
  TokenAuth* const auth_;
};

}  // namespace pkb

#endif  // PKB_SERVER_LEADERBOARD_SERVICE_H_
