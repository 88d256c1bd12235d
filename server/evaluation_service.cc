#include "server/evaluation_service.h"

#include <deque>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/grpc_status.h"
#include "spdlog/spdlog.h"
#include "worker/engine/static_check.h"

namespace pkb {
namespace {

// Streams one job's events to one client. Deletes itself in OnDone (which gRPC calls only after
// the method handler has returned the reactor, so the handler may still use it).
class EventStream : public grpc::ServerWriteReactor<v1::EvalEvent> {
 public:
  explicit EventStream(Scheduler* scheduler)
      : scheduler_(scheduler), sink_(std::make_shared<Sink>(this)) {}

  // Watch: subscribes to an existing job; the history may be written before this returns.
  void Watch(std::string job_id, int64_t after_sequence) {
    job_id_ = std::move(job_id);
    absl::Status st = scheduler_->Watch(job_id_, after_sequence, sink_);
    if (!st.ok()) FinishOnce(ToGrpcStatus(st));
  }

  // Submit: the job is queued and this stream subscribed in one step; its events (QUEUED first)
  // follow once durable, so the handler never waits for the store.
  void Submit(v1::SubmitRequest request) {
    absl::StatusOr<SubmitOutcome> out = scheduler_->SubmitAndWatch(std::move(request), sink_);
    if (!out.ok()) {
      FinishOnce(ToGrpcStatus(out.status()));
      return;
    }
    job_id_ = out->job_id;
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (finish_pending_) {
      Finish(*finish_pending_);
      finish_pending_.reset();
      return;
    }
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the client stopped reading"));
      return;
    }
    const bool was_done = pending_.front().stage() == v1::DONE;
    pending_.pop_front();
    if (was_done) {
      FinishLocked(grpc::Status::OK);
      return;
    }
    if (!finished_ && !pending_.empty()) WriteNextLocked();
  }

  void OnCancel() override { FinishOnce(grpc::Status::CANCELLED); }

  void OnDone() override {
    {
      absl::MutexLock lock(&sink_->mu);
      sink_->owner = nullptr;
    }
    if (!job_id_.empty()) scheduler_->Unwatch(job_id_, sink_.get());
    delete this;
  }

 private:
  // What the scheduler holds: outlives the reactor, forgets it in OnDone.
  struct Sink : EventSink {
    explicit Sink(EventStream* o) : owner(o) {}
    void OnEvent(const v1::EvalEvent& event) override {
      absl::MutexLock lock(&mu);
      if (owner) owner->Push(event);
    }
    void OnError(const absl::Status& status) override {
      absl::MutexLock lock(&mu);
      if (owner) owner->FinishOnce(ToGrpcStatus(status));
    }
    absl::Mutex mu;
    EventStream* owner ABSL_GUARDED_BY(mu);
  };

  void Push(const v1::EvalEvent& event) {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    pending_.push_back(event);
    if (!writing_) WriteNextLocked();
  }
  void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    writing_ = true;
    StartWrite(&pending_.front());
  }
  void FinishOnce(const grpc::Status& status) {
    absl::MutexLock lock(&mu_);
    FinishLocked(status);
  }
  // Finish waits for the write in flight, so the DONE event is never cut off.
  void FinishLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    if (writing_) {
      finish_pending_ = status;
    } else {
      Finish(status);
    }
  }

  Scheduler* const scheduler_;
  const std::shared_ptr<Sink> sink_;
  std::string job_id_;  // set by the handler, read in OnDone
  absl::Mutex mu_;
  std::deque<v1::EvalEvent> pending_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> finish_pending_ ABSL_GUARDED_BY(mu_);
};

class FailedStream : public grpc::ServerWriteReactor<v1::EvalEvent> {
 public:
  explicit FailedStream(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

absl::Status EvaluationService::CheckOwner(const Principal& who, const std::string& job_id,
                                           bool to_change) {
  if (job_id.empty()) return absl::InvalidArgumentError("job_id is empty");
  // An open coordinator's callers are all admins; researchers read every job (as the
  // leaderboard lets them), but only its submitter or an admin may change one.
  if (!auth_->enabled() || who.role == Role::kAdmin) return absl::OkStatus();
  if (who.role == Role::kResearcher && !to_change) return absl::OkStatus();
  absl::StatusOr<v1::Job> job = scheduler_->Get(job_id);
  if (!job.ok()) return job.status();
  if (job->request().submitter() != who.name) {
    return absl::PermissionDeniedError(
        absl::StrCat("job ", job_id, " was submitted by another token; '", who.name, "' may ",
                     to_change ? "cancel" : "read", " only its own jobs"));
  }
  return absl::OkStatus();
}

grpc::ServerWriteReactor<v1::EvalEvent>* EvaluationService::Submit(
    grpc::CallbackServerContext* ctx, const v1::SubmitRequest* request) {
  absl::StatusOr<Principal> who = auth_->Check(ctx, {Role::kAgent, Role::kResearcher});
  if (!who.ok()) return new FailedStream(ToGrpcStatus(who.status()));
  if (absl::Status st = auth_->ChargeSubmit(*who); !st.ok())
    return new FailedStream(ToGrpcStatus(st));
  v1::SubmitRequest req = *request;
  if (auth_->enabled()) req.set_submitter(who->name);  // who submits is the token's, not a claim
  auto* stream = new EventStream(scheduler_);
  stream->Submit(std::move(req));
  return stream;
}

grpc::ServerWriteReactor<v1::EvalEvent>* EvaluationService::Watch(grpc::CallbackServerContext* ctx,
                                                                  const v1::WatchRequest* request) {
  absl::StatusOr<Principal> who = auth_->Check(ctx, {Role::kAgent, Role::kResearcher});
  if (!who.ok()) return new FailedStream(ToGrpcStatus(who.status()));
  if (absl::Status st = CheckOwner(*who, request->job_id(), /*to_change=*/false); !st.ok())
    return new FailedStream(ToGrpcStatus(st));
  auto* stream = new EventStream(scheduler_);
  stream->Watch(request->job_id(), request->after_sequence());
  return stream;
}

grpc::ServerUnaryReactor* EvaluationService::Get(grpc::CallbackServerContext* ctx,
                                                 const v1::GetJobRequest* request,
                                                 v1::Job* response) {
  auto* reactor = ctx->DefaultReactor();
  absl::StatusOr<Principal> who = auth_->Check(ctx, {Role::kAgent, Role::kResearcher});
  absl::Status allowed =
      who.ok() ? CheckOwner(*who, request->job_id(), /*to_change=*/false) : who.status();
  if (!allowed.ok()) {
    reactor->Finish(ToGrpcStatus(allowed));
    return reactor;
  }
  absl::StatusOr<v1::Job> job = scheduler_->Get(request->job_id());
  if (job.ok()) *response = std::move(*job);
  reactor->Finish(ToGrpcStatus(job.status()));
  return reactor;
}

grpc::ServerUnaryReactor* EvaluationService::Cancel(grpc::CallbackServerContext* ctx,
                                                    const v1::CancelRequest* request,
                                                    v1::Job* response) {
  auto* reactor = ctx->DefaultReactor();
  absl::StatusOr<Principal> who = auth_->Check(ctx, {Role::kAgent, Role::kResearcher});
  absl::Status allowed =
      who.ok() ? CheckOwner(*who, request->job_id(), /*to_change=*/true) : who.status();
  if (!allowed.ok()) {
    reactor->Finish(ToGrpcStatus(allowed));
    return reactor;
  }
  absl::StatusOr<v1::Job> job = scheduler_->Cancel(request->job_id(), "by a client request");
  if (job.ok()) *response = std::move(*job);
  reactor->Finish(ToGrpcStatus(job.status()));
  return reactor;
}

grpc::ServerUnaryReactor* EvaluationService::ListProblems(grpc::CallbackServerContext* ctx,
                                                          const v1::ListProblemsRequest* request,
                                                          v1::ProblemCatalog* response) {
  auto* reactor = ctx->DefaultReactor();
  if (absl::StatusOr<Principal> who = auth_->Check(ctx, {Role::kAgent, Role::kResearcher});
      !who.ok()) {
    reactor->Finish(ToGrpcStatus(who.status()));
    return reactor;
  }
  *response = catalog_->listing();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* EvaluationService::GetProblem(grpc::CallbackServerContext* ctx,
                                                        const v1::GetProblemRequest* request,
                                                        v1::ProblemSpec* response) {
  auto* reactor = ctx->DefaultReactor();
  if (absl::StatusOr<Principal> who = auth_->Check(ctx, {Role::kAgent, Role::kResearcher});
      !who.ok()) {
    reactor->Finish(ToGrpcStatus(who.status()));
    return reactor;
  }
  absl::StatusOr<const v1::ProblemSpec*> spec =
      request->slug().empty() ? catalog_->Find(request->id()) : catalog_->FindSlug(request->slug());
  if (!spec.ok()) {
    reactor->Finish(ToGrpcStatus(spec.status()));
    return reactor;
  }
  *response = **spec;
  if (reference_times_ != nullptr) {
    // The figures are a help, not the spec: a store that cannot answer leaves them out.
    absl::StatusOr<std::vector<v1::ReferenceTime>> times = reference_times_->Of(**spec);
    if (times.ok()) {
      for (v1::ReferenceTime& t : *times) *response->add_reference_times() = std::move(t);
    } else {
      spdlog::warn("reference times of problem {}: {}", (*spec)->id(), times.status().ToString());
    }
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

namespace {

// The Check's answer to a compile task's outcome.
void FillCompile(const CompileAnswer& a, v1::CheckAnswer* answer) {
  answer->set_compiled_by(a.worker_id);
  if (!a.status.ok()) {
    answer->set_compile_verdict(v1::CheckAnswer::NOT_COMPILED);
    answer->set_compile_message(std::string(a.status.message()));
    return;
  }
  const v1::EvalResult& r = a.result;
  switch (r.status()) {
    case v1::COMPILED:
      answer->set_compile_verdict(v1::CheckAnswer::COMPILED);
      answer->set_compile_message(absl::StrCat("on worker ", a.worker_id, ": ", r.message()));
      *answer->mutable_compile() = r.compile();
      return;
    case v1::COMPILE_ERROR:
      answer->set_compile_verdict(v1::CheckAnswer::COMPILE_ERROR);
      answer->set_compile_message(r.message());
      *answer->mutable_compile() = r.compile();
      return;
    case v1::REJECTED:
      if (r.policy_findings_size() > 0) {
        // The worker's engine applies the policy too; one of another version may disagree.
        answer->set_verdict(v1::POLICY);
        answer->mutable_policy_findings()->CopyFrom(r.policy_findings());
        answer->set_message(r.message());
      }
      break;
    default:
      break;
  }
  answer->set_compile_verdict(v1::CheckAnswer::NOT_COMPILED);
  answer->set_compile_message(absl::StrCat("worker ", a.worker_id, " answered ",
                                           v1::Status_Name(r.status()), ": ", r.message()));
  if (r.has_compile()) *answer->mutable_compile() = r.compile();
}

}  // namespace

grpc::ServerUnaryReactor* EvaluationService::Check(grpc::CallbackServerContext* ctx,
                                                   const v1::CheckRequest* request,
                                                   v1::CheckAnswer* response) {
  auto* reactor = ctx->DefaultReactor();
  absl::StatusOr<Principal> who = auth_->Check(ctx, {Role::kAgent, Role::kResearcher});
  if (!who.ok()) {
    reactor->Finish(ToGrpcStatus(who.status()));
    return reactor;
  }
  // The request as Submit would check it, so a check that passes is a submission that is valid.
  v1::SubmitRequest req;
  req.set_problem_id(request->problem_id());
  req.set_world_size(request->world_size());
  req.set_source(request->source());
  req.set_dtype(request->dtype());
  req.set_language(request->language());
  if (absl::Status st = catalog_->Normalize(&req, scheduler_->options().default_gpu_class);
      !st.ok()) {
    reactor->Finish(ToGrpcStatus(st));
    return reactor;
  }
  // The name the engine gives the source, so findings point where a submission's would.
  const std::string name = req.spec().language() == "cpp" ? "candidate.cc" : "candidate.cu";
  std::vector<v1::Diagnostic> findings = CheckSource(req.source(), name);
  if (!findings.empty()) {
    response->set_verdict(v1::POLICY);
    response->set_message(absl::StrCat("breaks ", findings.size(),
                                       " rule(s) of the source policy (docs/security.md); first, "
                                       "at line ",
                                       findings[0].line(), ": ", findings[0].message()));
    for (auto& d : findings) *response->add_policy_findings() = std::move(d);
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  response->set_verdict(v1::POLICY_OK);
  if (!request->compile()) {
    response->set_message(
        "breaks no rule of the source policy (not compiled: ask with compile, or a practice "
        "submission compiles and runs it without ranking)");
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  // A compile is a worker's work: charged as a submission is.
  if (absl::Status st = auth_->ChargeSubmit(*who); !st.ok()) {
    reactor->Finish(ToGrpcStatus(st));
    return reactor;
  }
  response->set_message("breaks no rule of the source policy");
  // Answered once, perhaps before StartCompile returns, with the scheduler's lock held: filling
  // the answer and Finish do not block.
  scheduler_->StartCompile(req.spec(), req.source(), [reactor, response](CompileAnswer a) {
    FillCompile(a, response);
    if (response->verdict() == v1::POLICY_OK) {
      const bool not_compiled = response->compile_verdict() == v1::CheckAnswer::NOT_COMPILED;
      response->set_message(absl::StrCat("breaks no rule of the source policy; ",
                                         not_compiled ? "not compiled: " : "",
                                         response->compile_message()));
    }
    reactor->Finish(grpc::Status::OK);
  });
  return reactor;
}

}  // namespace pkb
