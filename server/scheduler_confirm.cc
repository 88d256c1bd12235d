// The scheduler's confirmation runs and shape runs of ranked results (scheduler.h), and the
// draws they rest on: a job's secret offset and its ranked shapes.
#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/eval_spec.h"
#include "common/hash.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/scheduler.h"
#include "spdlog/spdlog.h"

namespace pkb {

int64_t JobSetOffset(int64_t secret, const std::string& job_id) {
  // The offset reaches the rank process, where a candidate can read it and print it into its
  // verdict. Drawn per job from the secret, knowing one job's offset says nothing about another
  // job's (a replayed answer table fails) nor about the secret. 30 bits: seeds are ints.
  std::string h = Sha256Hex(absl::StrCat(secret, "/", job_id));
  return 1 + static_cast<int64_t>(std::stoul(h.substr(0, 8), nullptr, 16) & 0x3FFFFFFF);
}

std::vector<std::pair<int64_t, int64_t>> DrawRankedShapes(int64_t secret, const std::string& job_id,
                                                          const v1::ShapeRange& range,
                                                          int64_t own_m, int64_t own_n, int count) {
  std::vector<std::pair<int64_t, int64_t>> out;
  const v1::ShapeRange& r = range;
  if (r.m_step() < 1 || r.n_step() < 1 || r.m_min() < 1 || r.n_min() < 1 || r.m_max() < r.m_min() ||
      r.n_max() < r.n_min()) {
    return out;  // unset (a catalog of before) or malformed: no shape runs
  }
  const int64_t cm = (r.m_max() - r.m_min()) / r.m_step() + 1;
  const int64_t cn = (r.n_max() - r.n_min()) / r.n_step() + 1;
  if (cm > (int64_t{1} << 24) || cn > (int64_t{1} << 24)) return out;
  const int64_t points = cm * cn;
  // Like JobSetOffset: from the secret and the job id, so that a submitter cannot know its shapes
  // before the job exists, and one job's shapes say nothing about another's.
  const std::string h = Sha256Hex(absl::StrCat(secret, "/shapes/", job_id));
  std::mt19937_64 rng(std::stoull(h.substr(0, 16), nullptr, 16));
  auto at = [&](int64_t i) {
    return std::make_pair(r.m_min() + (i / cn) * r.m_step(), r.n_min() + (i % cn) * r.n_step());
  };
  auto taken = [&](const std::pair<int64_t, int64_t>& s) {
    return (s.first == own_m && s.second == own_n) ||
           std::find(out.begin(), out.end(), s) != out.end();
  };
  for (int tries = 0; static_cast<int>(out.size()) < count && tries < 256; ++tries) {
    auto s = at(static_cast<int64_t>(rng() % static_cast<uint64_t>(points)));
    if (!taken(s)) out.push_back(s);
  }
  // A range of a few points: take the free ones in order.
  for (int64_t i = 0; static_cast<int>(out.size()) < count && i < points && points <= 256; ++i) {
    if (!taken(at(i))) out.push_back(at(i));
  }
  return out;
}

bool Scheduler::NeedsConfirmation(const v1::Job& job) {
  return job.stage() == v1::DONE && job.result().status() == v1::OK &&
         job.cached_from_job_id().empty() && job.confirms_job_id().empty() &&
         !job.request().spec().practice() && !job.request().spec().functional();  // neither ranks
}

void Scheduler::QueueConfirmation(JobState& original) {
  const v1::Job& o = original.job;
  v1::SubmitRequest request = o.request();  // the source, spec, submitter and metadata
  request.set_no_cache(true);  // never joined by a submission, never answered from the cache
  // Its board is the class of the worker that ran the original: time it again on that class.
  if (!o.gpu_class().empty()) {
    request.mutable_spec()->set_gpu_class(o.gpu_class());
    MirrorLegacyFields(&request);
  }
  v1::EvalEvent queued;
  v1::Job job = NewQueuedJob(std::move(request), o.job_key(), o.problem_version(), &queued);
  job.set_harness_version(o.harness_version());
  job.set_confirms_job_id(o.job_id());
  queued.set_message(absl::StrCat("confirmation run of job ", o.job_id(),
                                  ": the service times the same source and spec again (queued, ",
                                  queue_.size(), " ahead)"));
  const std::string id = job.job_id();
  Persist(job, /*create=*/true, &queued);
  if (options_.observer) options_.observer->JobSubmitted("confirmation");
  original.job.set_confirmation_job_id(id);
  original.job.mutable_result()->set_confirmation_job_id(id);
  JobState cs;
  cs.next_sequence = 2;
  cs.avoid_worker = o.reported_by_worker();
  cs.job = std::move(job);
  queue_.push_back(id);
  jobs_.emplace(id, std::move(cs));
}

std::string Scheduler::QueueShapeRuns(JobState& original) {
  const v1::Job& o = original.job;
  const v1::EvalSpec& spec = o.request().spec();
  v1::ShapeRange range;
  absl::StatusOr<const v1::ProblemSpec*> problem = catalog_->Find(spec.problem_id());
  if (problem.ok()) {
    for (const v1::WorldLayout& l : (*problem)->layouts()) {
      if (l.world_size() == spec.world_size()) range = l.ranked_shapes();
    }
  }
  const std::vector<std::pair<int64_t, int64_t>> shapes = DrawRankedShapes(
      options_.secret_set_offset, o.job_id(), range, spec.m(), spec.n(), kShapeRuns);
  if (shapes.empty()) {
    return absl::StrCat(": the result ranks once that run is OK too (no shape runs: problem ",
                        spec.problem_id(), " declares no ranked shape at W=", spec.world_size(),
                        " besides this one)");
  }
  std::vector<std::string> named;
  for (const auto& [m, n] : shapes) {
    v1::SubmitRequest request = o.request();  // the source, spec, submitter and metadata
    request.set_no_cache(true);
    v1::EvalSpec* s = request.mutable_spec();
    if (!o.gpu_class().empty()) s->set_gpu_class(o.gpu_class());
    s->set_m(m);
    s->set_n(n);
    MirrorLegacyFields(&request);
    // Its own key (another shape is another evaluation), with the secret as the seed domain as
    // every ranked job's (Prepare).
    v1::EvalSpec keyed = *s;
    keyed.set_set_offset(options_.secret_set_offset);
    const std::string key =
        JobKey(keyed, request.source(), o.problem_version(), o.harness_version());
    v1::EvalEvent queued;
    v1::Job job = NewQueuedJob(std::move(request), key, o.problem_version(), &queued);
    job.set_harness_version(o.harness_version());
    job.set_confirms_job_id(o.job_id());
    job.set_shape_run(true);
    queued.set_message(absl::StrCat("shape run of job ", o.job_id(),
                                    ": the service times the same source at m=", m, ", n=", n,
                                    " (queued, ", queue_.size(), " ahead)"));
    const std::string id = job.job_id();
    Persist(job, /*create=*/true, &queued);
    if (options_.observer) options_.observer->JobSubmitted("shape");
    original.job.add_shape_job_ids(id);
    original.job.mutable_result()->add_shape_job_ids(id);
    named.push_back(absl::StrCat(id, " (m=", m, ", n=", n, ")"));
    JobState ss;
    ss.next_sequence = 2;
    ss.job = std::move(job);
    queue_.push_back(id);
    jobs_.emplace(id, std::move(ss));
  }
  return absl::StrCat(", and shape run", named.size() > 1 ? "s " : " ",
                      absl::StrJoin(named, " and "),
                      ": the result ranks once all are OK too, with the geometric mean of its "
                      "figures over the shapes");
}

}  // namespace pkb
