// pkb.v1.Admin on the gRPC callback API: operations only admin tokens may call.
#ifndef PKB_SERVER_ADMIN_SERVICE_H_
#define PKB_SERVER_ADMIN_SERVICE_H_

#include "pkb/v1/admin.grpc.pb.h"
#include "server/auth.h"
#include "server/scheduler.h"

namespace pkb {

class AdminService final : public v1::Admin::CallbackService {
 public:
  // Both must outlive the service.
  AdminService(Scheduler* scheduler, TokenAuth* auth) : scheduler_(scheduler), auth_(auth) {}
  grpc::ServerUnaryReactor* VoidWorker(grpc::CallbackServerContext* ctx,
                                       const v1::VoidWorkerRequest* request,
                                       v1::VoidWorkerAnswer* response) override;

 private:
  Scheduler* const scheduler_;
  TokenAuth* const auth_;
};

}  // namespace pkb

#endif  // PKB_SERVER_ADMIN_SERVICE_H_
