#include "server/leaderboard.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace pkb {
namespace {

// The verdicts that are the submission's fault when a ranked run gets them.
constexpr v1::Status kSecretSeedFailures[] = {v1::COMPILE_ERROR, v1::RUNTIME_ERROR, v1::MISMATCH,
                                              v1::TIMEOUT};

std::string JobGpuClass(const v1::Job& job) {
  return job.gpu_class().empty() ? job.request().spec().gpu_class() : job.gpu_class();
}

std::string Slug(const v1::Job& job, const ProblemCatalogIndex* catalog) {
  if (!job.result().problem_slug().empty()) return job.result().problem_slug();
  if (catalog) {
    auto p = catalog->Find(job.request().spec().problem_id());
    if (p.ok()) return (*p)->slug();
  }
  return "";
}

// One OK original that passed the filter and is not disqualified, with its confirmation and the
// run whose figure the boards use (itself, or its confirmation when that one is lower).
struct Candidate {
  const v1::Job* job;
  v1::Confirmation confirmation;
  const v1::Job* figure_run;
};

// The results of a filter, sorted for boards: `ranks` (CONFIRMED or UNCONFIRMED) and `pending`.
// Pointers into the storage members, so it is filled in place and never copied.
struct Ranking {
  std::vector<v1::Job> originals;
  std::map<std::string, v1::Job> confirmations;  // by job id
  std::vector<Candidate> ranks;
  std::vector<Candidate> pending;
  int disqualified = 0;
  int failed_confirmation = 0;
  Ranking() = default;
  Ranking(const Ranking&) = delete;
  Ranking& operator=(const Ranking&) = delete;
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

absl::Status RankingJobs(JobStore* store, const v1::ResultFilter& f, Ranking* r) {
  JobQuery q = ToJobQuery(f);
  q.statuses = {v1::OK};
  q.exclude_cache_copies = true;
  q.confirmations = false;
  PKB_ASSIGN_OR_RETURN(r->originals, store->ListJobs(q));
  // Their confirmation runs, finished or not. They share the originals' request metadata, so the
  // same filter finds them, less the time window (a confirmation finishes after its original)
  // and the GPU class (a confirmation asks for the class its original ran on).
  JobQuery cq = ToJobQuery(f);
  cq.from_micros = cq.to_micros = 0;
  cq.gpu_class.clear();
  cq.confirmations = true;
  PKB_ASSIGN_OR_RETURN(std::vector<v1::Job> confirmations, store->ListJobs(cq));
  for (v1::Job& c : confirmations) {
    std::string id = c.job_id();
    r->confirmations.emplace(std::move(id), std::move(c));
  }
  PKB_ASSIGN_OR_RETURN(DisqualifiedSet disq, FindDisqualified(store, f.problem_id()));
  for (const v1::Job& job : r->originals) {
    // Practice and functional runs never rank (a functional one has no speedup).
    if (job.request().spec().practice() || job.request().spec().functional()) continue;
    if (disq.count({job.request().spec().problem_id(), job.source_sha256()})) {
      ++r->disqualified;
      continue;
    }
    auto find = [&](const std::string& id) -> const v1::Job* {
      auto c = r->confirmations.find(id);
      return c == r->confirmations.end() ? nullptr : &c->second;
    };
    const v1::Job* confirmation = find(job.confirmation_job_id());
    Candidate cand{&job, ConfirmationOf(job, find), &job};
    switch (cand.confirmation.state()) {
      case v1::CONFIRMED:
        if (confirmation->result().speedup() < job.result().speedup())
          cand.figure_run = confirmation;
        r->ranks.push_back(std::move(cand));
        break;
      case v1::UNCONFIRMED:
        r->ranks.push_back(std::move(cand));
        break;
      case v1::CONFIRMATION_PENDING:
        r->pending.push_back(std::move(cand));
        break;
      default:
        ++r->failed_confirmation;
    }
  }
  return absl::OkStatus();
}

v1::LeaderboardEntry Entry(const Candidate& cand, const ProblemCatalogIndex* catalog) {
  const v1::Job& job = *cand.job;
  const v1::SubmitRequest& r = job.request();
  const v1::EvalResult& res = cand.figure_run->result();
  v1::LeaderboardEntry e;
  e.set_problem_id(r.spec().problem_id());
  e.set_problem_slug(Slug(job, catalog));
  e.set_world_size(r.spec().world_size());
  e.set_dtype(r.spec().dtype());
  e.set_gpu(res.gpu());
  e.set_gpu_class(JobGpuClass(job));
  e.set_speedup(cand.confirmation.speedup());
  *e.mutable_confirmation() = cand.confirmation;
  e.set_candidate_median_us(res.candidate().median_us());
  e.set_baseline_median_us(res.baseline().median_us());
  e.set_job_id(job.job_id());
  e.set_submitter(r.submitter());
  e.set_model(r.model());
  e.set_agent(r.agent());
  *e.mutable_tags() = r.tags();
  e.set_ranked(r.spec().ranked());
  e.set_finished_unix_micros(job.updated_unix_micros());
  return e;
}

const char* StageWord(v1::Stage stage) { return stage == v1::QUEUED ? "queued" : "running"; }

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
      // Practice and functional runs (try-outs; a functional run's ranks may share GPUs) never
      // disqualify.
      if (job.request().spec().practice() || job.request().spec().functional()) continue;
      out.emplace(job.request().spec().problem_id(), job.source_sha256());
    }
  }
  return out;
}

v1::Confirmation ConfirmationOf(const v1::Job& job, const v1::Job* confirmation) {
  return ConfirmationOf(job, [&](const std::string& id) -> const v1::Job* {
    return confirmation != nullptr && confirmation->job_id() == id ? confirmation : nullptr;
  });
}

v1::Confirmation ConfirmationOf(const v1::Job& job, const JobLookup& find) {
  v1::Confirmation c;
  if (job.stage() != v1::DONE || job.result().status() != v1::OK ||
      !job.cached_from_job_id().empty() || !job.confirms_job_id().empty() ||
      job.request().spec().practice() || job.request().spec().functional()) {
    return c;  // CONFIRMATION_NONE: not a result that could rank
  }
  const double first = job.result().speedup();
  c.set_first_speedup(first);
  c.set_job_id(job.confirmation_job_id());
  if (job.confirmation_job_id().empty()) {
    c.set_state(v1::UNCONFIRMED);
    c.set_speedup(first);
    return c;
  }
  // Every run the result waits for: the confirmation first, then the shape runs. The first
  // failure decides (a result that cannot be confirmed is not pending); otherwise it is pending
  // while any runs.
  std::string failed;
  std::vector<std::string> pending;
  auto check = [&](const v1::Job* run, const std::string& id, const std::string& what) {
    if (run == nullptr) {
      if (failed.empty()) failed = absl::StrCat(what, " (job ", id, ") is not in the store");
      return false;
    }
    if (run->stage() != v1::DONE) {
      pending.push_back(absl::StrCat(what, " (job ", id, ", ", StageWord(run->stage()), ")"));
      return false;
    }
    if (run->result().status() != v1::OK) {
      if (failed.empty())
        failed =
            absl::StrCat(what, " (job ", id, ") ended ", v1::Status_Name(run->result().status()));
      return false;
    }
    return true;
  };
  const v1::Job* confirmation = find(job.confirmation_job_id());
  const bool confirmed = check(confirmation, job.confirmation_job_id(), "its confirmation run");
  if (confirmation != nullptr && confirmation->stage() == v1::DONE) {
    c.set_confirmation_status(confirmation->result().status());
    if (confirmed) c.set_confirmation_speedup(confirmation->result().speedup());
  }
  const double default_figure = std::min(first, c.confirmation_speedup());
  if (job.shape_job_ids_size() > 0) {
    v1::ShapeFigure* d = c.add_shapes();
    d->set_m(job.request().spec().m());
    d->set_n(job.request().spec().n());
    d->set_job_id(job.job_id());
    d->set_stage(confirmation ? confirmation->stage() : v1::DONE);
    d->set_status(c.confirmation_status());
    if (confirmed) d->set_speedup(default_figure);
  }
  for (const std::string& id : job.shape_job_ids()) {
    const v1::Job* run = find(id);
    v1::ShapeFigure* f = c.add_shapes();
    f->set_job_id(id);
    std::string what = "its shape run";
    if (run != nullptr) {
      f->set_m(run->request().spec().m());
      f->set_n(run->request().spec().n());
      f->set_stage(run->stage());
      if (run->stage() == v1::DONE) f->set_status(run->result().status());
      what = absl::StrCat("its shape run at m=", f->m(), ", n=", f->n());
    }
    if (check(run, id, what)) f->set_speedup(run->result().speedup());
  }
  if (!failed.empty()) {
    c.set_state(v1::CONFIRMATION_FAILED);
    c.set_reason(failed);
    return c;
  }
  if (!pending.empty()) {
    c.set_state(v1::CONFIRMATION_PENDING);
    c.set_speedup(first);
    c.set_reason(absl::StrCat("awaiting ", absl::StrJoin(pending, "; ")));
    return c;
  }
  c.set_state(v1::CONFIRMED);
  if (c.shapes_size() == 0) {
    c.set_speedup(default_figure);
    return c;
  }
  // The geometric mean over the shapes: one shape's luck or weakness moves the figure by its
  // share only, and a candidate tuned for the default shape alone gains little.
  double log_sum = 0;
  for (const v1::ShapeFigure& f : c.shapes()) log_sum += std::log(f.speedup());
  c.set_speedup(std::exp(log_sum / c.shapes_size()));
  return c;
}

std::string NotRankedReason(const v1::Job& job, const DisqualifiedSet& disqualified,
                            const v1::Confirmation& confirmation) {
  if (job.stage() != v1::DONE) return "not finished";
  if (!job.cached_from_job_id().empty())
    return absl::StrCat("a cached copy of job ", job.cached_from_job_id(), ", which ranks instead");
  if (job.request().spec().functional())
    return "a functional run (correctness only: its ranks may share GPUs, no speedup)";
  if (!job.confirms_job_id().empty())
    return absl::StrCat("a confirmation run of job ", job.confirms_job_id(),
                        ", which ranks with the lower of the two speedups");
  if (job.request().spec().practice())
    return "a practice submission: it never ranks, and never disqualifies its source";
  if (job.result().status() != v1::OK)
    return absl::StrCat("verdict ", v1::Status_Name(job.result().status()));
  if (disqualified.count({job.request().spec().problem_id(), job.source_sha256()})) {
    std::string why =
        "this source was rejected, or failed a ranked (secret-seed) run, on this problem";
    // Its own confirmation or shape run may be that run: say which.
    if (confirmation.state() == v1::CONFIRMATION_FAILED)
      absl::StrAppend(&why, " (", confirmation.reason(), ")");
    return why;
  }
  if (confirmation.state() == v1::CONFIRMATION_PENDING ||
      confirmation.state() == v1::CONFIRMATION_FAILED) {
    return confirmation.reason();
  }
  return "";
}

absl::StatusOr<v1::LeaderboardAnswer> QueryLeaderboard(JobStore* store,
                                                       const ProblemCatalogIndex* catalog,
                                                       const v1::LeaderboardQuery& query) {
  Ranking ranking;
  PKB_RETURN_IF_ERROR(RankingJobs(store, query.filter(), &ranking));
  // board -> group (user or model) -> best entry (ranked, and pending apart)
  using BoardKey = std::tuple<int32_t, int32_t, std::string, std::string>;
  using Groups = std::map<std::string, v1::LeaderboardEntry>;
  std::map<BoardKey, std::pair<Groups, Groups>> boards;
  auto add = [&](const Candidate& cand, bool pending) {
    const v1::SubmitRequest& r = cand.job->request();
    BoardKey key{r.spec().problem_id(), r.spec().world_size(), r.spec().dtype(),
                 JobGpuClass(*cand.job)};
    const std::string& group = query.group_by() == v1::GROUP_BY_MODEL ? r.model() : r.submitter();
    Groups& groups = pending ? boards[key].second : boards[key].first;
    v1::LeaderboardEntry e = Entry(cand, catalog);
    auto [it, fresh] = groups.try_emplace(group, e);
    int results = fresh ? 1 : it->second.results() + 1;
    if (!fresh && Better(e, it->second)) it->second = std::move(e);
    it->second.set_results(results);
  };
  for (const Candidate& cand : ranking.ranks) add(cand, false);
  for (const Candidate& cand : ranking.pending) add(cand, true);
  v1::LeaderboardAnswer answer;
  answer.set_ranking_results(static_cast<int32_t>(ranking.ranks.size()));
  answer.set_disqualified_results(ranking.disqualified);
  answer.set_pending_results(static_cast<int32_t>(ranking.pending.size()));
  answer.set_unconfirmed_results(ranking.failed_confirmation);
  for (auto& [key, both] : boards) {
    auto& [ranked, pending] = both;
    auto sorted = [](Groups& groups) {
      std::vector<v1::LeaderboardEntry> entries;
      for (auto& [group, e] : groups) entries.push_back(std::move(e));
      std::sort(entries.begin(), entries.end(), Better);
      return entries;
    };
    // A pending result is shown only where it would improve its group's ranked entry.
    for (auto it = pending.begin(); it != pending.end();) {
      auto r = ranked.find(it->first);
      it = r != ranked.end() && !Better(it->second, r->second) ? pending.erase(it) : std::next(it);
    }
    std::vector<v1::LeaderboardEntry> entries = sorted(ranked);
    std::vector<v1::LeaderboardEntry> waiting = sorted(pending);
    if (entries.empty() && waiting.empty()) continue;
    v1::Board* b = answer.add_boards();
    b->set_problem_id(std::get<0>(key));
    b->set_world_size(std::get<1>(key));
    b->set_dtype(std::get<2>(key));
    b->set_gpu_class(std::get<3>(key));
    b->set_problem_slug(entries.empty() ? waiting.front().problem_slug()
                                        : entries.front().problem_slug());
    for (size_t i = 0; i < entries.size(); ++i) {
      if (query.limit() > 0 && static_cast<int>(i) >= query.limit()) break;
      entries[i].set_rank(static_cast<int32_t>(i + 1));
      *b->add_entries() = std::move(entries[i]);
    }
    for (size_t i = 0; i < waiting.size(); ++i) {
      if (query.limit() > 0 && static_cast<int>(i) >= query.limit()) break;
      *b->add_pending() = std::move(waiting[i]);
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
  const std::vector<double> ps = query.p().empty()
                                     ? std::vector<double>{0, 1, 1.5, 2}
                                     : std::vector<double>(query.p().begin(), query.p().end());

  Ranking ranking;
  PKB_RETURN_IF_ERROR(RankingJobs(store, f, &ranking));
  // model -> task -> best ranking result
  std::map<std::string, std::map<std::pair<int32_t, int32_t>, const Candidate*>> best;
  for (const Candidate& cand : ranking.ranks) {
    const v1::SubmitRequest& r = cand.job->request();
    std::pair<int32_t, int32_t> task{r.spec().problem_id(), r.spec().world_size()};
    if (!tasks.count(task)) continue;
    const Candidate*& b = best[r.model()][task];
    if (b == nullptr || cand.confirmation.speedup() > b->confirmation.speedup()) b = &cand;
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
    for (const auto& [task, cand] : per_task) {
      double speedup = cand->confirmation.speedup();
      log_sum += std::log(std::max(speedup, 1e-12));
      v1::TaskBest* t = s.add_best();
      t->set_problem_id(task.first);
      t->set_world_size(task.second);
      t->set_problem_slug(tasks.at(task));
      t->set_speedup(speedup);
      t->set_job_id(cand->job->job_id());
    }
    if (!per_task.empty()) s.set_geomean_speedup(std::exp(log_sum / per_task.size()));
    for (double p : ps) {
      int fast = 0;
      for (const auto& [task, cand] : per_task) fast += cand->confirmation.speedup() > p;
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
                         FindDisqualified(store, out.job().request().spec().problem_id()));
    // Its confirmation run and shape runs, those the store has.
    std::map<std::string, v1::Job> runs;
    std::vector<std::string> ids(out.job().shape_job_ids().begin(),
                                 out.job().shape_job_ids().end());
    if (!out.job().confirmation_job_id().empty()) ids.push_back(out.job().confirmation_job_id());
    for (const std::string& id : ids) {
      absl::StatusOr<v1::Job> c = store->GetJob(id);
      if (c.ok()) {
        runs.emplace(id, std::move(*c));
      } else if (c.status().code() != absl::StatusCode::kNotFound) {
        return c.status();
      }
    }
    *out.mutable_confirmation() =
        ConfirmationOf(out.job(), [&](const std::string& id) -> const v1::Job* {
          auto c = runs.find(id);
          return c == runs.end() ? nullptr : &c->second;
        });
    std::string why = NotRankedReason(out.job(), disq, out.confirmation());
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
  s.set_problem_id(r.spec().problem_id());
  s.set_problem_slug(Slug(job, catalog));
  s.set_world_size(r.spec().world_size());
  s.set_dtype(r.spec().dtype());
  s.set_gpu_class(JobGpuClass(job));
  s.set_stage(job.stage());
  s.set_submitter(r.submitter());
  s.set_model(r.model());
  s.set_agent(r.agent());
  *s.mutable_tags() = r.tags();
  s.set_ranked(r.spec().ranked());
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
  s.set_confirms_job_id(job.confirms_job_id());
  s.set_confirmation_job_id(job.confirmation_job_id());
  s.set_practice(r.spec().practice());
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
