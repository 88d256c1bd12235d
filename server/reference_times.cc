#include "server/reference_times.h"

#include <algorithm>
#include <tuple>

namespace pkb {
namespace {

// The value at fraction q of sorted `v` (nearest rank).
double Quantile(const std::vector<double>& v, double q) {
  size_t i = size_t(q * double(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : Quantile(v, 0.5);
}

// The baseline the job's speedup used, or 0 where it has none.
double BaselineOf(const v1::EvalResult& r) {
  return r.baseline_node_us() > 0 ? r.baseline_node_us() : r.baseline().wall_per_iter_us();
}

}  // namespace

std::vector<v1::ReferenceTime> ReferenceTimesOf(const std::vector<v1::Job>& newest_first,
                                                const v1::ProblemSpec& problem, int per_group) {
  struct Group {
    std::vector<double> baselines, graphs;
    int64_t newest = 0;
  };
  std::map<std::tuple<int32_t, std::string>, Group> groups;
  for (const v1::Job& job : newest_first) {
    const v1::EvalSpec& s = job.request().spec();
    const v1::EvalResult& r = job.result();
    if (job.stage() != v1::DONE || r.status() != v1::OK || !job.cached_from_job_id().empty() ||
        !job.confirms_job_id().empty() || s.functional() || s.problem_id() != problem.id() ||
        s.m() != problem.default_m() || s.n() != problem.default_n() ||
        s.dtype() != problem.default_dtype() || BaselineOf(r) <= 0) {
      continue;
    }
    const std::string& gpu_class = job.gpu_class().empty() ? s.gpu_class() : job.gpu_class();
    Group& g = groups[{s.world_size(), gpu_class}];
    if (int(g.baselines.size()) >= per_group) continue;
    g.baselines.push_back(BaselineOf(r));
    if (r.baseline_graph_us() > 0) g.graphs.push_back(r.baseline_graph_us());
    g.newest = std::max(g.newest, job.updated_unix_micros());
  }
  std::vector<v1::ReferenceTime> out;
  for (auto& [key, g] : groups) {
    std::sort(g.baselines.begin(), g.baselines.end());
    v1::ReferenceTime t;
    t.set_world_size(std::get<0>(key));
    t.set_gpu_class(std::get<1>(key));
    t.set_median_us(Quantile(g.baselines, 0.5));
    t.set_p10_us(Quantile(g.baselines, 0.1));
    t.set_p90_us(Quantile(g.baselines, 0.9));
    t.set_samples(int32_t(g.baselines.size()));
    t.set_graph_median_us(Median(g.graphs));
    t.set_newest_micros(g.newest);
    out.push_back(std::move(t));
  }
  return out;
}

absl::StatusOr<std::vector<v1::ReferenceTime>> ReferenceTimes::Of(const v1::ProblemSpec& problem) {
  const absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    auto it = cache_.find(problem.id());
    if (it != cache_.end() && now - it->second.at < ttl_) return it->second.times;
  }
  JobQuery q;
  q.problem_id = problem.id();
  q.statuses = {v1::OK};
  q.exclude_cache_copies = true;
  q.confirmations = false;
  q.newest_first = true;
  q.limit = kScanned;
  absl::StatusOr<std::vector<v1::Job>> jobs = store_->ListJobs(q);
  if (!jobs.ok()) return jobs.status();
  std::vector<v1::ReferenceTime> times = ReferenceTimesOf(*jobs, problem, kPerGroup);
  absl::MutexLock lock(&mu_);
  cache_[problem.id()] = Cached{now, times};
  return times;
}

}  // namespace pkb
