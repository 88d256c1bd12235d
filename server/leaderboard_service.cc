#include "server/leaderboard_service.h"

#include <cmath>
#include <map>

#include "common/status_macros.h"
#include "server/grpc_status.h"

namespace pkb {

absl::StatusOr<v1::LeaderboardAnswer> QueryLeaderboard(JobStore* store,
                                                       const v1::LeaderboardQuery& q) {
  PKB_ASSIGN_OR_RETURN(std::vector<v1::Job> jobs, store->ListOkJobs(q.problem_id()));
  v1::LeaderboardAnswer answer;
  std::map<std::pair<int32_t, int32_t>, v1::LeaderboardEntry> best;
  for (const v1::Job& job : jobs) {
    const auto& r = job.request();
    const auto& res = job.result();
    if (!job.cached_from_job_id().empty()) continue;  // a copy: the original counts
    if (q.world_size() && r.world_size() != q.world_size()) continue;
    if (!q.submitter().empty() && r.submitter() != q.submitter()) continue;
    if (!q.model().empty() && r.model() != q.model()) continue;
    if (!q.gpu_class().empty() && r.gpu_class() != q.gpu_class()) continue;
    answer.set_ok_results(answer.ok_results() + 1);
    auto key = std::make_pair(r.problem_id(), r.world_size());
    auto it = best.find(key);
    if (it != best.end() && it->second.speedup() >= res.speedup()) continue;
    v1::LeaderboardEntry e;
    e.set_problem_id(r.problem_id());
    e.set_problem_slug(res.problem_slug());
    e.set_world_size(r.world_size());
    e.set_dtype(r.dtype());
    e.set_gpu(res.gpu());
    e.set_speedup(res.speedup());
    e.set_candidate_median_us(res.candidate().median_us());
    e.set_baseline_median_us(res.baseline().median_us());
    e.set_job_id(job.job_id());
    e.set_submitter(r.submitter());
    e.set_model(r.model());
    e.set_finished_unix_micros(job.updated_unix_micros());
    best[key] = std::move(e);
  }
  const double p = q.fast_p_threshold() > 0 ? q.fast_p_threshold() : 1.0;
  double log_sum = 0;
  int fast = 0;
  for (auto& [key, e] : best) {
    if (q.limit() && answer.entries_size() >= q.limit()) break;
    log_sum += std::log(std::max(e.speedup(), 1e-9));
    fast += e.speedup() > p;
    *answer.add_entries() = std::move(e);
  }
  if (answer.entries_size() > 0) {
    answer.set_geomean_speedup(std::exp(log_sum / answer.entries_size()));
    answer.set_fast_p(static_cast<double>(fast) / answer.entries_size());
  }
  return answer;
}

grpc::ServerUnaryReactor* LeaderboardService::Query(grpc::CallbackServerContext* ctx,
                                                    const v1::LeaderboardQuery* request,
                                                    v1::LeaderboardAnswer* response) {
  auto* reactor = ctx->DefaultReactor();
  if (auto who = auth_->Check(ctx, {Role::kAgent, Role::kResearcher, Role::kWorker}); !who.ok()) {
    reactor->Finish(ToGrpcStatus(who.status()));
    return reactor;
  }
  auto answer = QueryLeaderboard(store_, *request);
  if (answer.ok()) *response = std::move(*answer);
  reactor->Finish(ToGrpcStatus(answer.status()));
  return reactor;
}

}  // namespace pkb
