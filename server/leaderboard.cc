#include "server/leaderboard.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pkb {
namespace {

// The verdicts that are the submission's fault when a ranked run gets them.
constexpr v1::Status kSecretSeedFailures[] = {v1::COMPILE_ERROR, v1::RUNTIME_ERROR, v1::MISMATCH,
                                              v1::TIMEOUT};

std::string JobGpuClass(const v1::Job& job) {
  return job.gpu_class().empty() ? job.request().gpu_class() : job.gpu_class();
}

std::string Slug(const v1::Job& job, const ProblemCatalogIndex* catalog) {
  if (!job.result().problem_slug().empty()) return job.result().problem_slug();
  if (catalog) {
    auto p = catalog->Find(job.request().problem_id());
    if (p.ok()) return (*p)->slug();
  }
  return "";
}

// The ranking (OK, original, not disqualified) jobs that pass `f`.
struct Ranking {
  std::vector<v1::Job> jobs;
  int disqualified = 0;
};

JobQuery ToJobQuery(const v1::ResultFilter& f) {
  JobQuery q;
  q.problem_id = f.problem_id();
  q.world_size = f.world_size();
  q.gpu_class = f.gpu_class();
  q.dtype = f.dtype();
  q.submitter = f.submitter();
  q.model = f.model();
  q.agent = f.agent();
  q.tag = f.tag();
  q.from_micros = f.from_unix_micros();
  q.to_micros = f.to_unix_micros();
  if (f.seeds() == v1::SEEDS_PUBLIC) q.ranked = false;
  if (f.seeds() == v1::SEEDS_SECRET) q.ranked = true;
  return q;
}

absl::StatusOr<Ranking> RankingJobs(JobStore* store, const v1::ResultFilter& f) {
  JobQuery q = ToJobQuery(f);
  q.statuses = {v1::OK};
  q.exclude_cache_copies = true;
  PKB_ASSIGN_OR_RETURN(std::vector<v1::Job> ok, store->ListJobs(q));
  PKB_ASSIGN_OR_RETURN(DisqualifiedSet disq, FindDisqualified(store, f.problem_id()));
  Ranking r;
  for (v1::Job& job : ok) {
    if (job.request().functional()) continue;  // correctness only: no speedup to rank
    if (disq.count({job.request().problem_id(), job.source_sha256()})) {
      ++r.disqualified;
      continue;
    }
    r.jobs.push_back(std::move(job));
  }
  return r;
}

v1::LeaderboardEntry Entry(const v1::Job& job, const ProblemCatalogIndex* catalog) {
  const v1::SubmitRequest& r = job.request();
  const v1::EvalResult& res = job.result();
  v1::LeaderboardEntry e;
  e.set_problem_id(r.problem_id());
  e.set_problem_slug(Slug(job, catalog));
  e.set_world_size(r.world_size());
  e.set_dtype(r.dtype());
  e.set_gpu(res.gpu());
  e.set_gpu_class(JobGpuClass(job));
  e.set_speedup(res.speedup());
  e.set_candidate_median_us(res.candidate().median_us());
  e.set_baseline_median_us(res.baseline().median_us());
  e.set_job_id(job.job_id());
  e.set_submitter(r.submitter());
  e.set_model(r.model());
  e.set_agent(r.agent());
  *e.mutable_tags() = r.tags();
  e.set_ranked(r.ranked());
  e.set_finished_unix_micros(job.updated_unix_micros());
  return e;
}

// Better: higher speedup; on a tie, the earlier result (and then the smaller job id).
bool Better(const v1::LeaderboardEntry& a, const v1::LeaderboardEntry& b) {
  if (a.speedup() != b.speedup()) return a.speedup() > b.speedup();
  if (a.finished_unix_micros() != b.finished_unix_micros())
    return a.finished_unix_micros() < b.finished_unix_micros();
  return a.job_id() < b.job_id();
}

}  // namespace

absl::StatusOr<DisqualifiedSet> FindDisqualified(JobStore* store, int32_t problem_id) {
  DisqualifiedSet out;
  JobQuery rejected;
  rejected.problem_id = problem_id;
  rejected.statuses = {v1::REJECTED};
  PKB_ASSIGN_OR_RETURN(std::vector<v1::Job> jobs, store->ListJobs(rejected));
  JobQuery failed_secret;
  failed_secret.problem_id = problem_id;
  failed_secret.ranked = true;
  failed_secret.statuses.assign(std::begin(kSecretSeedFailures), std::end(kSecretSeedFailures));
  PKB_ASSIGN_OR_RETURN(std::vector<v1::Job> failed, store->ListJobs(failed_secret));
  for (const auto* list : {&jobs, &failed}) {
    for (const v1::Job& job : *list) {
      // A functional run is a try-out (its ranks may share GPUs): it never disqualifies.
      if (job.request().functional()) continue;
      out.emplace(job.request().problem_id(), job.source_sha256());
    }
  }
  return out;
}

std::string NotRankedReason(const v1::Job& job, const DisqualifiedSet& disqualified) {
  if (job.stage() != v1::DONE) return "not finished";
  if (!job.cached_from_job_id().empty())
    return absl::StrCat("a cached copy of job ", job.cached_from_job_id(), ", which ranks instead");
  if (job.request().functional())
    return "a functional run (correctness only: its ranks may share GPUs, no speedup)";
  if (job.result().status() != v1::OK)
    return absl::StrCat("verdict ", v1::Status_Name(job.result().status()));
  if (disqualified.count({job.request().problem_id(), job.source_sha256()}))
    return "this source was rejected, or failed a ranked (secret-seed) run, on this problem";
  return "";
}

absl::StatusOr<v1::LeaderboardAnswer> QueryLeaderboard(JobStore* store,
                                                       const ProblemCatalogIndex* catalog,
                                                       const v1::LeaderboardQuery& query) {
  PKB_ASSIGN_OR_RETURN(Ranking ranking, RankingJobs(store, query.filter()));
  // board -> group (user or model) -> best entry
  using BoardKey = std::tuple<int32_t, int32_t, std::string, std::string>;
  std::map<BoardKey, std::map<std::string, v1::LeaderboardEntry>> boards;
  for (const v1::Job& job : ranking.jobs) {
    const v1::SubmitRequest& r = job.request();
    BoardKey key{r.problem_id(), r.world_size(), r.dtype(), JobGpuClass(job)};
    const std::string& group = query.group_by() == v1::GROUP_BY_MODEL ? r.model() : r.submitter();
    v1::LeaderboardEntry e = Entry(job, catalog);
    auto [it, fresh] = boards[key].try_emplace(group, e);
    int results = fresh ? 1 : it->second.results() + 1;
    if (!fresh && Better(e, it->second)) it->second = std::move(e);
    it->second.set_results(results);
  }
  v1::LeaderboardAnswer answer;
  answer.set_ranking_results(static_cast<int32_t>(ranking.jobs.size()));
  answer.set_disqualified_results(ranking.disqualified);
  for (auto& [key, groups] : boards) {
    std::vector<v1::LeaderboardEntry> entries;
    for (auto& [group, e] : groups) entries.push_back(std::move(e));
    std::sort(entries.begin(), entries.end(), Better);
    v1::Board* b = answer.add_boards();
    b->set_problem_id(std::get<0>(key));
    b->set_world_size(std::get<1>(key));
    b->set_dtype(std::get<2>(key));
    b->set_gpu_class(std::get<3>(key));
    b->set_problem_slug(entries.front().problem_slug());
    for (size_t i = 0; i < entries.size(); ++i) {
      if (query.limit() > 0 && static_cast<int>(i) >= query.limit()) break;
      entries[i].set_rank(static_cast<int32_t>(i + 1));
      *b->add_entries() = std::move(entries[i]);
    }
  }
  return answer;
}

absl::StatusOr<v1::SuiteAnswer> QuerySuite(JobStore* store, const ProblemCatalogIndex& catalog,
                                           const v1::SuiteQuery& query) {
  const v1::ResultFilter& f = query.filter();
  std::set<int32_t> subset(query.problem_ids().begin(), query.problem_ids().end());
  // The tasks, in order.
  std::map<std::pair<int32_t, int32_t>, std::string> tasks;  // (problem, W) -> slug
  for (const v1::ProblemSpec& p : catalog.catalog().problems()) {
    if (f.problem_id() && p.id() != f.problem_id()) continue;
    if (!subset.empty() && !subset.count(p.id())) continue;
    for (const v1::WorldLayout& l : p.layouts()) {
      if (!l.supported()) continue;
      if (f.world_size() && l.world_size() != f.world_size()) continue;
      tasks[{p.id(), l.world_size()}] = p.slug();
    }
  }
  std::vector<double> ps(query.p().begin(), query.p().end());
  if (ps.empty()) ps = {0, 1, 1.5, 2};

  PKB_ASSIGN_OR_RETURN(Ranking ranking, RankingJobs(store, f));
  // model -> task -> best job
  std::map<std::string, std::map<std::pair<int32_t, int32_t>, const v1::Job*>> best;
  for (const v1::Job& job : ranking.jobs) {
    std::pair<int32_t, int32_t> task{job.request().problem_id(), job.request().world_size()};
    if (!tasks.count(task)) continue;
    const v1::Job*& b = best[job.request().model()][task];
    if (b == nullptr || job.result().speedup() > b->result().speedup()) b = &job;
  }
  v1::SuiteAnswer answer;
  const int n = static_cast<int>(tasks.size());
  answer.set_tasks(n);
  std::vector<v1::ModelScore> scores;
  for (const auto& [model, per_task] : best) {
    v1::ModelScore s;
    s.set_model(model);
    s.set_tasks(n);
    s.set_tasks_correct(static_cast<int32_t>(per_task.size()));
    double log_sum = 0;
    for (const auto& [task, job] : per_task) {
      double speedup = job->result().speedup();
      log_sum += std::log(std::max(speedup, 1e-12));
      v1::TaskBest* t = s.add_best();
      t->set_problem_id(task.first);
      t->set_world_size(task.second);
      t->set_problem_slug(tasks.at(task));
      t->set_speedup(speedup);
      t->set_job_id(job->job_id());
    }
    if (!per_task.empty()) s.set_geomean_speedup(std::exp(log_sum / per_task.size()));
    for (double p : ps) {
      int fast = 0;
      for (const auto& [task, job] : per_task) fast += job->result().speedup() > p;
      v1::FastP* fp = s.add_fast_p();
      fp->set_p(p);
      fp->set_tasks_fast(fast);
      fp->set_fast_p(n > 0 ? static_cast<double>(fast) / n : 0);
    }
    scores.push_back(std::move(s));
  }
  const size_t key_p = ps.size() > 1 ? 1 : 0;
  std::stable_sort(scores.begin(), scores.end(), [&](const auto& a, const auto& b) {
    if (a.fast_p(key_p).fast_p() != b.fast_p(key_p).fast_p())
      return a.fast_p(key_p).fast_p() > b.fast_p(key_p).fast_p();
    return a.geomean_speedup() > b.geomean_speedup();
  });
  for (auto& s : scores) *answer.add_models() = std::move(s);
  return answer;
}

absl::StatusOr<v1::Submission> GetSubmission(JobStore* store, const std::string& job_id,
                                             bool include_source) {
  v1::Submission out;
  PKB_ASSIGN_OR_RETURN(*out.mutable_job(), store->GetJob(job_id));
  if (include_source) {
    PKB_ASSIGN_OR_RETURN(*out.mutable_job()->mutable_request()->mutable_source(),
                         store->GetSource(job_id));
  }
  PKB_ASSIGN_OR_RETURN(std::vector<v1::EvalEvent> events, store->ListEvents(job_id, 0));
  for (auto& e : events) *out.add_events() = std::move(e);
  if (out.job().stage() == v1::DONE) {
    PKB_ASSIGN_OR_RETURN(DisqualifiedSet disq,
                         FindDisqualified(store, out.job().request().problem_id()));
    std::string why = NotRankedReason(out.job(), disq);
    out.set_ranks(why.empty());
    out.set_not_ranked_reason(why);
  }
  return out;
}

v1::SubmissionSummary Summarize(const v1::Job& job, const ProblemCatalogIndex* catalog) {
  const v1::SubmitRequest& r = job.request();
  const v1::EvalResult& res = job.result();
  v1::SubmissionSummary s;
  s.set_job_id(job.job_id());
  s.set_problem_id(r.problem_id());
  s.set_problem_slug(Slug(job, catalog));
  s.set_world_size(r.world_size());
  s.set_dtype(r.dtype());
  s.set_gpu_class(JobGpuClass(job));
  s.set_stage(job.stage());
  s.set_submitter(r.submitter());
  s.set_model(r.model());
  s.set_agent(r.agent());
  *s.mutable_tags() = r.tags();
  s.set_ranked(r.ranked());
  s.set_created_unix_micros(job.created_unix_micros());
  s.set_source_sha256(job.source_sha256());
  if (job.stage() == v1::DONE) {
    s.set_status(res.status());
    s.set_message(res.message());
    s.set_speedup(res.speedup());
    s.set_candidate_median_us(res.candidate().median_us());
    s.set_baseline_median_us(res.baseline().median_us());
    s.set_cached(!job.cached_from_job_id().empty());
    s.set_finished_unix_micros(job.updated_unix_micros());
    s.set_total_seconds(res.total_seconds());
  }
  return s;
}

absl::StatusOr<v1::ListSubmissionsAnswer> ListSubmissions(JobStore* store,
                                                          const ProblemCatalogIndex* catalog,
                                                          const v1::ListSubmissionsRequest& req) {
  JobQuery q = ToJobQuery(req.filter());
  q.by_created = true;
  q.newest_first = true;
  q.done_only = req.done_only();
  q.limit = req.limit() > 0 ? req.limit() : 1000;
  PKB_ASSIGN_OR_RETURN(std::vector<v1::Job> jobs, store->ListJobs(q));
  v1::ListSubmissionsAnswer out;
  for (const v1::Job& job : jobs) *out.add_submissions() = Summarize(job, catalog);
  return out;
}

}  // namespace pkb
