#include "server/admin_service.h"

#include "server/grpc_status.h"
#include "spdlog/spdlog.h"

namespace pkb {

grpc::ServerUnaryReactor* AdminService::VoidWorker(grpc::CallbackServerContext* ctx,
                                                   const v1::VoidWorkerRequest* request,
                                                   v1::VoidWorkerAnswer* response) {
  auto* reactor = ctx->DefaultReactor();
  absl::StatusOr<Principal> who = auth_->Check(ctx, {Role::kAdmin});
  if (!who.ok()) {
    reactor->Finish(ToGrpcStatus(who.status()));
    return reactor;
  }
  spdlog::warn("admin '{}' voids the results of worker {}", who->name, request->worker_id());
  absl::StatusOr<std::vector<std::string>> voided =
      scheduler_->VoidWorker(request->worker_id(), request->reason());
  if (voided.ok()) {
    response->set_voided(static_cast<int32_t>(voided->size()));
    for (const std::string& id : *voided) response->add_job_ids(id);
  }
  reactor->Finish(ToGrpcStatus(voided.status()));
  return reactor;
}

}  // namespace pkb
