#include "server/worker_service.h"

#include <algorithm>
#include <deque>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/grpc_status.h"
#include "spdlog/spdlog.h"

namespace pkb {
namespace {

class WorkerStream : public grpc::ServerBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage> {
 public:
  WorkerStream(Scheduler* scheduler, uint64_t connection_id, Principal who, bool open)
      : scheduler_(scheduler),
        connection_id_(connection_id),
        who_(std::move(who)),
        open_(open),
        connection_(std::make_shared<Connection>(this)) {
    StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The worker closed its side or the stream broke.
      scheduler_->Disconnect(connection_id_, "stream closed by the worker");
      FinishOnce(grpc::Status::OK);
      return;
    }
    absl::Status st;
    switch (in_.kind_case()) {
      case v1::WorkerMessage::kRegister:
        if (registered_) {
          st = absl::FailedPreconditionError("Register sent twice on one stream");
        } else if (absl::StatusOr<v1::Register> reg =
                       BindRegistration(who_, open_, in_.register_());
                   !reg.ok()) {
          spdlog::warn("refused a worker registration under token '{}': {}", who_.name,
                       std::string(reg.status().message()));
          st = reg.status();
        } else {
          st = scheduler_->Connect(connection_id_, *reg, connection_);
          registered_ = st.ok();
        }
        break;
      case v1::WorkerMessage::kHeartbeat:
        st = registered_ ? scheduler_->OnHeartbeat(connection_id_, in_.heartbeat())
                         : NotRegistered();
        break;
      case v1::WorkerMessage::kEvent:
        st = registered_ ? scheduler_->OnJobEvent(connection_id_, in_.event()) : NotRegistered();
        break;
      case v1::WorkerMessage::kCompileResult:
        st = registered_ ? scheduler_->OnCompileResult(connection_id_, in_.compile_result())
                         : NotRegistered();
        break;
      case v1::WorkerMessage::kDrain:
        st = registered_ ? scheduler_->OnDrain(connection_id_, in_.drain()) : NotRegistered();
        break;
      default:
        st = absl::InvalidArgumentError("empty WorkerMessage");
    }
    if (!st.ok()) {
      scheduler_->Disconnect(connection_id_, std::string(st.message()));
      FinishOnce(ToGrpcStatus(st));
      return;
    }
    absl::MutexLock lock(&mu_);
    if (!finished_) StartRead(&in_);
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (finish_pending_) {
      Finish(*finish_pending_);
      finish_pending_.reset();
      return;
    }
    if (!ok) return;  // the read side notices and finishes
    pending_.pop_front();
    if (!finished_ && !pending_.empty()) WriteNextLocked();
  }

  void OnCancel() override { FinishOnce(grpc::Status::CANCELLED); }

  void OnDone() override {
    {
      absl::MutexLock lock(&connection_->mu);
      connection_->owner = nullptr;
    }
    scheduler_->Disconnect(connection_id_, "stream ended");
    delete this;
  }

 private:
  // What the scheduler holds: outlives the reactor, forgets it in OnDone.
  struct Connection : WorkerConnection {
    explicit Connection(WorkerStream* o) : owner(o) {}
    void Send(const v1::CoordinatorMessage& message) override {
      absl::MutexLock lock(&mu);
      if (owner) owner->Push(message);
    }
    void Close(const absl::Status& status) override {
      absl::MutexLock lock(&mu);
      if (owner) owner->FinishOnce(ToGrpcStatus(status));
    }
    absl::Mutex mu;
    WorkerStream* owner ABSL_GUARDED_BY(mu);
  };

  static absl::Status NotRegistered() {
    return absl::FailedPreconditionError("send Register first");
  }

  void Push(const v1::CoordinatorMessage& m) {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    pending_.push_back(m);
    if (!writing_) WriteNextLocked();
  }
  void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    writing_ = true;
    StartWrite(&pending_.front());
  }
  void FinishOnce(const grpc::Status& status) {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    finished_ = true;
    if (writing_) {
      finish_pending_ = status;
    } else {
      Finish(status);
    }
  }

  Scheduler* const scheduler_;
  const uint64_t connection_id_;
  const Principal who_;
  const bool open_;  // no --tokens: the worker's claims are taken as given
  std::shared_ptr<Connection> connection_;
  v1::WorkerMessage in_;  // only touched by the read chain
  bool registered_ = false;
  absl::Mutex mu_;
  std::deque<v1::CoordinatorMessage> pending_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> finish_pending_ ABSL_GUARDED_BY(mu_);
};

class RefusedStream : public grpc::ServerBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage> {
 public:
  explicit RefusedStream(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

absl::StatusOr<v1::Register> BindRegistration(const Principal& who, bool open, v1::Register reg) {
  // Ranks that share GPUs: at most the candidate API's PKB_MAX_RANKS (8) of them.
  constexpr int32_t kMaxFunctionalWorld = 8;
  const int32_t functional = reg.capabilities().max_functional_world_size();
  if (functional < 0 || functional > kMaxFunctionalWorld) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker '", reg.worker_id(), "' claims max_functional_world_size ", functional,
                     "; it is 0 to ", kMaxFunctionalWorld));
  }
  // Compile tasks run on the worker's CPUs beside its job: a bounded claim, whoever makes it.
  constexpr int32_t kMaxCompileSlots = 64;
  if (reg.capabilities().compile_slots() < 0 ||
      reg.capabilities().compile_slots() > kMaxCompileSlots) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker '", reg.worker_id(), "' claims compile_slots ",
                     reg.capabilities().compile_slots(), "; it is 0 to ", kMaxCompileSlots));
  }
  if (!who.worker) {
    // An open coordinator takes the worker's word; under --tokens only worker tokens carry a
    // grant, and an admin token may not pose as a worker.
    if (!open)
      return absl::PermissionDeniedError(absl::StrCat(
          "token '", who.name, "' grants no worker capabilities: connect with a worker token"));
    return reg;
  }
  const WorkerGrant& g = *who.worker;
  const std::string& id = reg.worker_id();
  if (id != who.name && !absl::StartsWith(id, absl::StrCat(who.name, "/"))) {
    return absl::PermissionDeniedError(
        absl::StrCat("token '", who.name, "' may register only as worker '", who.name, "' or '",
                     who.name, "/<suffix>', not '", id, "'"));
  }
  v1::WorkerCapabilities* caps = reg.mutable_capabilities();
  if (caps->gpu_class() != g.gpu_class) {
    return absl::PermissionDeniedError(absl::StrCat("worker '", id, "' claims gpu_class '",
                                                    caps->gpu_class(), "'; its token grants '",
                                                    g.gpu_class, "'"));
  }
  if (caps->max_world_size() > g.max_world_size) {
    return absl::PermissionDeniedError(
        absl::StrCat("worker '", id, "' claims max_world_size ", caps->max_world_size(),
                     "; its token grants at most ", g.max_world_size));
  }
  if (caps->max_world_size() <= 0) caps->set_max_world_size(g.max_world_size);
  caps->set_slots(std::min(caps->slots() > 0 ? caps->slots() : 1, g.slots));
  return reg;
}

grpc::ServerBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage>* WorkerService::Connect(
    grpc::CallbackServerContext* ctx) {
  absl::StatusOr<Principal> who = auth_->Check(ctx, {Role::kWorker});
  if (!who.ok()) return new RefusedStream(ToGrpcStatus(who.status()));
  return new WorkerStream(scheduler_, next_connection_id_.fetch_add(1), *std::move(who),
                          !auth_->enabled());
}

}  // namespace pkb
