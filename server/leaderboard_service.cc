#include "server/leaderboard_service.h"

#include "absl/strings/str_cat.h"
#include "server/grpc_status.h"

namespace pkb {
namespace {

// Finishes `reactor` with `answer`'s status, moving its value into `response` when OK.
template <typename T>
grpc::ServerUnaryReactor* Answer(grpc::ServerUnaryReactor* reactor, absl::StatusOr<T> answer,
                                 T* response) {
  if (answer.ok()) *response = std::move(*answer);
  reactor->Finish(ToGrpcStatus(answer.status()));
  return reactor;
}

}  // namespace

grpc::ServerUnaryReactor* LeaderboardService::Query(grpc::CallbackServerContext* ctx,
                                                    const v1::LeaderboardQuery* request,
                                                    v1::LeaderboardAnswer* response) {
  auto* reactor = ctx->DefaultReactor();
  // Boards are public (the web leaderboard serves them without a token): agents read them too,
  // to see what they compete against.
  if (auto who = auth_->Check(ctx, {Role::kAgent, Role::kResearcher}); !who.ok()) {
    reactor->Finish(ToGrpcStatus(who.status()));
    return reactor;
  }
  return Answer(reactor, QueryLeaderboard(store_, catalog_, *request), response);
}

grpc::ServerUnaryReactor* LeaderboardService::Suite(grpc::CallbackServerContext* ctx,
                                                    const v1::SuiteQuery* request,
                                                    v1::SuiteAnswer* response) {
  auto* reactor = ctx->DefaultReactor();
  if (auto who = auth_->Check(ctx, {Role::kAgent, Role::kResearcher}); !who.ok()) {
    reactor->Finish(ToGrpcStatus(who.status()));
    return reactor;
  }
  return Answer(reactor, QuerySuite(store_, *catalog_, *request), response);
}

grpc::ServerUnaryReactor* LeaderboardService::GetSubmission(grpc::CallbackServerContext* ctx,
                                                            const v1::GetSubmissionRequest* request,
                                                            v1::Submission* response) {
  auto* reactor = ctx->DefaultReactor();
  absl::StatusOr<Principal> who = auth_->Check(ctx, {Role::kAgent, Role::kResearcher});
  if (!who.ok()) {
    reactor->Finish(ToGrpcStatus(who.status()));
    return reactor;
  }
  if (request->job_id().empty()) {
    reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "job_id is empty"));
    return reactor;
  }
  absl::StatusOr<v1::Submission> sub =
      pkb::GetSubmission(store_, request->job_id(), request->include_source());
  if (sub.ok() && who->role == Role::kAgent && sub->job().request().submitter() != who->name) {
    sub = absl::PermissionDeniedError(
        absl::StrCat("job ", request->job_id(), " is not a submission of '", who->name, "'"));
  }
  return Answer(reactor, std::move(sub), response);
}

grpc::ServerUnaryReactor* LeaderboardService::ListSubmissions(
    grpc::CallbackServerContext* ctx, const v1::ListSubmissionsRequest* request,
    v1::ListSubmissionsAnswer* response) {
  auto* reactor = ctx->DefaultReactor();
  absl::StatusOr<Principal> who = auth_->Check(ctx, {Role::kAgent, Role::kResearcher});
  if (!who.ok()) {
    reactor->Finish(ToGrpcStatus(who.status()));
    return reactor;
  }
  v1::ListSubmissionsRequest req = *request;
  if (who->role == Role::kAgent) req.mutable_filter()->set_submitter(who->name);
  return Answer(reactor, pkb::ListSubmissions(store_, catalog_, req), response);
}

}  // namespace pkb
