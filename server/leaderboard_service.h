// pkb.v1.Leaderboard: best OK result per (problem, world size) from the job store.
#ifndef PKB_SERVER_LEADERBOARD_SERVICE_H_
#define PKB_SERVER_LEADERBOARD_SERVICE_H_

#include "pkb/v1/leaderboard.grpc.pb.h"
#include "server/auth.h"
#include "server/job_store.h"

namespace pkb {

absl::StatusOr<v1::LeaderboardAnswer> QueryLeaderboard(JobStore* store,
                                                       const v1::LeaderboardQuery& query);

class LeaderboardService final : public v1::Leaderboard::CallbackService {
 public:
  LeaderboardService(JobStore* store, TokenAuth* auth) : store_(store), auth_(auth) {}
  grpc::ServerUnaryReactor* Query(grpc::CallbackServerContext* ctx,
                                  const v1::LeaderboardQuery* request,
                                  v1::LeaderboardAnswer* response) override;

 private:
  JobStore* const store_;
  TokenAuth* const auth_;
};

}  // namespace pkb

#endif  // PKB_SERVER_LEADERBOARD_SERVICE_H_
