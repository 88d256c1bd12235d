// pkb.v1.Evaluation on the gRPC callback API. Submit and Watch are one reactor each
// (EventStream): history and live events go through one queue with one write in flight, and the
// stream finishes after the DONE event is written. Under --tokens a job is its submitter's: Watch,
// Get and Cancel check the owner (see CheckOwner).
#ifndef PKB_SERVER_EVALUATION_SERVICE_H_
#define PKB_SERVER_EVALUATION_SERVICE_H_

#include "pkb/v1/evaluation.grpc.pb.h"
#include "server/auth.h"
#include "server/problem_catalog.h"
#include "server/reference_times.h"
#include "server/scheduler.h"

namespace pkb {

class EvaluationService final : public v1::Evaluation::CallbackService {
 public:
  // `reference_times` (may be null: none are reported) fills GetProblem's reference_times.
  EvaluationService(Scheduler* scheduler, const ProblemCatalogIndex* catalog, TokenAuth* auth,
                    ReferenceTimes* reference_times = nullptr)
      : scheduler_(scheduler), catalog_(catalog), auth_(auth), reference_times_(reference_times) {}

  grpc::ServerWriteReactor<v1::EvalEvent>* Submit(grpc::CallbackServerContext* ctx,
                                                  const v1::SubmitRequest* request) override;
  grpc::ServerWriteReactor<v1::EvalEvent>* Watch(grpc::CallbackServerContext* ctx,
                                                 const v1::WatchRequest* request) override;
  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* ctx, const v1::GetJobRequest* request,
                                v1::Job* response) override;
  grpc::ServerUnaryReactor* Cancel(grpc::CallbackServerContext* ctx,
                                   const v1::CancelRequest* request, v1::Job* response) override;
  grpc::ServerUnaryReactor* ListProblems(grpc::CallbackServerContext* ctx,
                                         const v1::ListProblemsRequest* request,
                                         v1::ProblemCatalog* response) override;
  grpc::ServerUnaryReactor* GetProblem(grpc::CallbackServerContext* ctx,
                                       const v1::GetProblemRequest* request,
                                       v1::ProblemSpec* response) override;
  // The source policy, run here; with `compile` and a clean policy, also a compile task on a worker
  // (Scheduler::StartCompile), answered when it answers. No job, no queue, nothing stored.
  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* ctx, const v1::CheckRequest* request,
                                  v1::CheckAnswer* response) override;

 private:
  // OK when `who` may read (or, `to_change`, cancel) the job: its submitter, an admin, a
  // researcher for reading; PERMISSION_DENIED otherwise, NOT_FOUND for an unknown job.
  absl::Status CheckOwner(const Principal& who, const std::string& job_id, bool to_change);

  Scheduler* const scheduler_;
  const ProblemCatalogIndex* const catalog_;
  TokenAuth* const auth_;
  ReferenceTimes* const reference_times_;
};

}  // namespace pkb

#endif  // PKB_SERVER_EVALUATION_SERVICE_H_
