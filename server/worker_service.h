// pkb.v1.Worker on the gRPC callback API: one bidirectional reactor per worker stream, reading
// WorkerMessages into the Scheduler and writing its CoordinatorMessages, one write in flight.
#ifndef PKB_SERVER_WORKER_SERVICE_H_
#define PKB_SERVER_WORKER_SERVICE_H_

#include <atomic>

#include "pkb/v1/worker.grpc.pb.h"
#include "server/auth.h"
#include "server/scheduler.h"

namespace pkb {

// What a worker may register as, under the token that opened its stream: the worker id must be the
// token's name or `<name>/<suffix>`, and the capabilities the coordinator keeps are the token's
// grant (the worker may offer a smaller world size, never another GPU class or a larger one).
// PERMISSION_DENIED naming what was claimed. An `open` coordinator (no --tokens) takes the claim.
absl::StatusOr<v1::Register> BindRegistration(const Principal& who, bool open, v1::Register reg);

class WorkerService final : public v1::Worker::CallbackService {
 public:
  WorkerService(Scheduler* scheduler, TokenAuth* auth) : scheduler_(scheduler), auth_(auth) {}
  grpc::ServerBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage>* Connect(
      grpc::CallbackServerContext* ctx) override;

 private:
  Scheduler* const scheduler_;
  TokenAuth* const auth_;
  std::atomic<uint64_t> next_connection_id_{1};
};

}  // namespace pkb

#endif  // PKB_SERVER_WORKER_SERVICE_H_
