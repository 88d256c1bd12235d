#include "server/scheduler.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/eval_spec.h"
#include "common/hash.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace pkb {

Scheduler::Scheduler(JobStore* store, Clock* clock, const ProblemCatalogIndex* catalog,
                     SchedulerOptions options)
    : store_(store), clock_(clock), catalog_(catalog), options_(std::move(options)) {
  id_salt_ = std::random_device{}();
  id_salt_ = (id_salt_ << 32) ^ std::random_device{}();
  commit_observer_ = store_->AddCommitObserver([this] { Committed(); });
}

Scheduler::~Scheduler() {
  Flush();  // no store callback may outlive us
  store_->RemoveCommitObserver(commit_observer_);
}

void Scheduler::Flush() {
  int64_t ticket;
  {
    absl::MutexLock lock(&mu_);
    ticket = writes_queued_;
  }
  WaitForWrites(ticket);
}

void Scheduler::Persist(const v1::Job& job, bool create, const v1::EvalEvent* event,
                        absl::Status* status) {
  JobWrite w;
  w.job = job;
  if (!create) w.job.mutable_request()->clear_source();  // stored once, at create
  w.create = create;
  if (event) w.event = *event;
  StoredWrite stored{++writes_queued_, absl::OkStatus(), create, job.job_id(), nullptr};
  if (event) stored.event = std::make_shared<const v1::EvalEvent>(*event);
  store_->Write(std::move(w), [this, status, stored](const absl::Status& st) mutable {
    if (status) *status = st;
    stored.status = st;
    absl::MutexLock lock(&committed_mu_);
    committed_.push_back(std::move(stored));
  });
}

void Scheduler::Committed() {
  std::vector<StoredWrite> writes;
  {
    absl::MutexLock lock(&committed_mu_);
    writes.swap(committed_);
  }
  if (writes.empty()) return;
  {
    absl::MutexLock lock(&mu_);
    for (const StoredWrite& w : writes) {
      if (!w.status.ok()) {
        spdlog::error("job {}: cannot store {}: {}", w.job_id,
                      w.create ? "its creation" : "an update", w.status.ToString());
        if (w.create) {
          DropUnstoredJob(w.job_id, w.status);
          continue;
        }
      }
      if (w.event) Deliver(*w.event);
    }
  }
  absl::MutexLock lock(&stored_mu_);
  writes_stored_ = writes.back().ticket;
}

void Scheduler::DropUnstoredJob(const std::string& job_id, const absl::Status& status) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  JobState& js = it->second;
  const absl::Status told = absl::UnavailableError(
      absl::StrCat("the coordinator could not store job ", job_id, " (", status.message(),
                   "); nothing of it was kept: submit again"));
  for (Watcher& w : js.sinks) w.sink->OnError(told);
  if (!js.job.worker_id().empty()) {
    // Leased before its creation failed: stop the run (the worker frees itself with its DONE).
    auto c = connection_of_worker_.find(js.job.worker_id());
    if (c != connection_of_worker_.end()) {
      v1::CoordinatorMessage m;
      m.mutable_cancel()->set_job_id(job_id);
      m.mutable_cancel()->set_reason("the coordinator could not store the job");
      workers_.at(c->second).connection->Send(m);
    }
  }
  auto k = inflight_by_key_.find(js.job.job_key());
  if (k != inflight_by_key_.end() && k->second == job_id) inflight_by_key_.erase(k);
  queue_.erase(std::remove(queue_.begin(), queue_.end(), job_id), queue_.end());
  ClearAhead(js);
  jobs_.erase(it);
}

void Scheduler::Deliver(const v1::EvalEvent& event) {
  auto it = jobs_.find(event.job_id());
  if (it == jobs_.end()) return;  // no one can watch it yet (a cached answer)
  JobState& js = it->second;
  for (Watcher& w : js.sinks) {
    if (event.sequence() <= w.last_sent) continue;  // Watch replayed it from the store
    w.sink->OnEvent(event);
    w.last_sent = event.sequence();
  }
  if (event.stage() != v1::DONE) return;
  auto k = inflight_by_key_.find(js.job.job_key());
  if (k != inflight_by_key_.end() && k->second == event.job_id()) inflight_by_key_.erase(k);
  jobs_.erase(it);
}

void Scheduler::WaitForWrites(int64_t ticket) {
  struct Arg {
    const int64_t* stored;
    int64_t ticket;
  } arg{&writes_stored_, ticket};
  absl::MutexLock lock(&stored_mu_, absl::Condition(
                                        +[](Arg* a) { return *a->stored >= a->ticket; }, &arg));
}

std::string Scheduler::NewJobId() {
  // Time first so ids sort by submission; the salt keeps two coordinators apart.
  return absl::StrFormat("j%x-%06x-%04x", NowMicros(), ++id_counter_ & 0xffffff, id_salt_ & 0xffff);
}

absl::Status Scheduler::Recover() {
  absl::MutexLock lock(&mu_);
  PKB_ASSIGN_OR_RETURN(std::vector<v1::Job> jobs, store_->ListUnfinishedJobs());
  absl::Time now = clock_->Now();
  for (v1::Job& job : jobs) {
    PKB_ASSIGN_OR_RETURN(std::string source, store_->GetSource(job.job_id()));
    PKB_ASSIGN_OR_RETURN(std::vector<v1::EvalEvent> events, store_->ListEvents(job.job_id(), 0));
    JobState js;
    job.mutable_request()->set_source(std::move(source));
    js.next_sequence = events.empty() ? 1 : events.back().sequence() + 1;
    const std::string id = job.job_id();
    if (!job.cached_from_job_id().empty()) {
      // A follower: back behind its leader, or finished from it, or on its own if it is gone.
      const std::string leader_id = job.cached_from_job_id();
      auto l = jobs_.find(leader_id);
      js.job = std::move(job);
      if (l != jobs_.end() && !l->second.finished) {
        js.leader = leader_id;
        l->second.followers.push_back(id);
        jobs_.emplace(id, std::move(js));
        continue;
      }
      absl::StatusOr<v1::Job> leader = store_->GetJob(leader_id);
      JobState& fs = jobs_.emplace(id, std::move(js)).first->second;
      if (leader.ok() && leader->stage() == v1::DONE &&
          leader->result().status() != v1::CANCELLED) {
        FinishFollower(fs, *leader, leader->result().message());
        continue;
      }
      fs.job.clear_cached_from_job_id();
      Emit(fs, v1::QUEUED, "the job it shared is gone; queued on its own", {});
      queue_.push_back(id);
      if (!fs.job.request().no_cache()) inflight_by_key_.emplace(fs.job.job_key(), id);
      continue;
    }
    if (!job.confirms_job_id().empty()) {
      const std::string original_id = job.confirms_job_id();
      absl::StatusOr<v1::Job> original = store_->GetJob(original_id);
      if (!original.ok() && original.status().code() != absl::StatusCode::kNotFound)
        return original.status();
      const bool named = original.ok() && (original->confirmation_job_id() == id ||
                                           std::count(original->shape_job_ids().begin(),
                                                      original->shape_job_ids().end(), id) > 0);
      if (!original.ok() || original->stage() != v1::DONE || !named) {
        // Created, but the coordinator stopped before its original's DONE was stored: the
        // original runs again, and its next OK verdict queues a confirmation of its own.
        js.job = std::move(job);
        jobs_.emplace(id, std::move(js));
        v1::EvalResult result;
        result.set_status(v1::CANCELLED);
        result.set_message(absl::StrCat("cancelled: the job it confirms (", original_id,
                                        ") had not finished when the coordinator restarted"));
        Finish(id, result, result.message());
        continue;
      }
      if (!job.shape_run()) js.avoid_worker = original->reported_by_worker();
    }
    if (!job.worker_id().empty()) {
      js.orphan_deadline = now + options_.lease_timeout;  // its worker may reconnect and resume
    } else {
      queue_.push_back(id);
    }
    if (!job.request().no_cache()) inflight_by_key_[job.job_key()] = id;
    js.job = std::move(job);
    jobs_.emplace(id, std::move(js));
  }
  spdlog::info("recovered {} unfinished jobs ({} queued)", jobs_.size(), queue_.size());
  return absl::OkStatus();
}

absl::StatusOr<std::pair<std::string, const v1::ProblemSpec*>> Scheduler::Prepare(
    v1::SubmitRequest& request) {
  PKB_RETURN_IF_ERROR(catalog_->Normalize(&request, options_.default_gpu_class));
  const v1::EvalSpec& spec = request.spec();
  PKB_ASSIGN_OR_RETURN(const v1::ProblemSpec* problem, catalog_->Find(spec.problem_id()));
  const std::string& gpu_class = spec.gpu_class();
  const bool well_formed =
      gpu_class.size() <= 32 && std::all_of(gpu_class.begin(), gpu_class.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
      });
  if (!well_formed || (gpu_class != "any" && !options_.gpu_classes.empty() &&
                       !options_.gpu_classes.count(gpu_class))) {
    std::vector<std::string> known(options_.gpu_classes.begin(), options_.gpu_classes.end());
    known.insert(known.begin(), "any");
    return absl::InvalidArgumentError(absl::StrCat(
        "gpu_class: '", gpu_class, "' is not a class this coordinator serves (",
        options_.gpu_classes.empty() ? "lower-case letters, digits, - and _, at most 32"
                                     : absl::StrJoin(known, ", "),
        ")"));
  }
  if (spec.practice() && spec.ranked())
    return absl::InvalidArgumentError(
        "practice: a practice run uses the public seeds and never ranks; submit it without "
        "`ranked`");
  if (spec.ranked() && options_.secret_set_offset == 0)
    return absl::FailedPreconditionError(
        "this coordinator has no secret seed (--secret-seed-file): submit without `ranked`");
  // The key is the one hash of the job (the engine reports it as the lease gives it). A ranked
  // job's inputs are the secret's: its key hashes the secret as the seed domain (each lease then
  // carries the job's own offset drawn from it, JobSetOffset), so ranked and public runs of one
  // source never share a key. Practice runs are keyed apart by `practice`.
  v1::EvalSpec keyed = spec;
  if (spec.ranked()) keyed.set_set_offset(options_.secret_set_offset);
  std::string key = JobKey(keyed, request.source(), problem->version(), options_.harness_version);
  return std::make_pair(std::move(key), problem);
}

absl::StatusOr<SubmitOutcome> Scheduler::Submit(v1::SubmitRequest request) {
  PKB_ASSIGN_OR_RETURN(auto prepared, Prepare(request));
  SubmitOutcome out;
  absl::Status created, updated;
  int64_t ticket;
  {
    absl::MutexLock lock(&mu_);
    PKB_RETURN_IF_ERROR(SubmitLocked(std::move(request), prepared.first, prepared.second, &out,
                                     &created, &updated));
    ticket = writes_queued_;
  }
  WaitForWrites(ticket);  // the job is stored before Submit answers
  PKB_RETURN_IF_ERROR(created);
  PKB_RETURN_IF_ERROR(updated);
  return out;
}

absl::StatusOr<SubmitOutcome> Scheduler::SubmitAndWatch(v1::SubmitRequest request,
                                                        std::shared_ptr<EventSink> sink) {
  PKB_ASSIGN_OR_RETURN(auto prepared, Prepare(request));
  SubmitOutcome out;
  absl::MutexLock lock(&mu_);
  PKB_RETURN_IF_ERROR(
      SubmitLocked(std::move(request), prepared.first, prepared.second, &out, nullptr, nullptr));
  // A new or cached job is in jobs_ with nothing durable yet: the sink hears every event from
  // Deliver. A joined one replays what is durable first.
  PKB_RETURN_IF_ERROR(WatchLocked(out.job_id, 0, std::move(sink)));
  return out;
}

absl::Status Scheduler::SubmitLocked(v1::SubmitRequest request, const std::string& key,
                                     const v1::ProblemSpec* problem, SubmitOutcome* out_ptr,
                                     absl::Status* created, absl::Status* updated) {
  SubmitOutcome& out = *out_ptr;
  std::optional<v1::Job> cached;
  if (!request.no_cache()) {
    auto it = inflight_by_key_.find(key);
    auto leader = it == inflight_by_key_.end() ? jobs_.end() : jobs_.find(it->second);
    if (leader != jobs_.end() && !leader->second.finished) {
      if (options_.observer) options_.observer->JobSubmitted("joined");
      if (leader->second.job.request().submitter() == request.submitter()) {
        out.job_id = it->second;
        out.joined = true;
        return absl::OkStatus();
      }
      // Another submitter's job: never hand out its id (its logs and its cancel are its owner's).
      FollowLocked(std::move(request), key, problem, leader->second, &out, created);
      return absl::OkStatus();
    }
    PKB_ASSIGN_OR_RETURN(cached, store_->FindCachedJob(key));
  }

  v1::EvalEvent queued;
  v1::Job job = NewQueuedJob(std::move(request), key, problem->version(), &queued);
  out.job_id = job.job_id();
  std::string where = absl::StrCat("queued (", queue_.size(), " ahead)");
  if (!cached) {
    // Say it when nothing connected could ever take it, rather than leave an agent waiting.
    if (!AnyConnectedCanRun(job)) {
      const bool functional = job.request().spec().functional();
      absl::StrAppend(&where, "; no connected worker can run it yet (needs world size ",
                      job.request().spec().world_size(), " <= the worker's max",
                      functional ? " for functional runs" : "", ", gpu class ",
                      job.request().spec().gpu_class(), ", harness ", job.harness_version(), ")",
                      functional ? ""
                                 : "; a functional run (correctness only) may put several ranks "
                                   "on one GPU");
    }
  }
  queued.set_message(cached ? "identical job already evaluated; answering from the cache" : where);

  if (cached) {
    // A finished identical job: a new job record that carries its result, marked cached.
    Persist(job, /*create=*/true, &queued, created);
    job.mutable_request()->clear_source();
    job.set_stage(v1::DONE);
    job.set_cached_from_job_id(cached->job_id());
    *job.mutable_result() = cached->result();
    job.set_reported_by_worker(cached->reported_by_worker());
    job.mutable_result()->set_cached(true);
    job.mutable_result()->clear_confirmation_job_id();  // the original's, not this copy's
    job.mutable_result()->clear_shape_job_ids();
    job.mutable_result()->set_job_key(key);
    v1::EvalEvent done;
    done.set_job_id(job.job_id());
    done.set_sequence(2);
    done.set_stage(v1::DONE);
    done.set_unix_micros(NowMicros());
    done.set_message(
        absl::StrCat("cached result of job ", cached->job_id(), ": ", cached->result().message()));
    *done.mutable_result() = job.result();
    Persist(job, /*create=*/false, &done, updated);
    out.cached = true;
    if (options_.observer) {
      options_.observer->JobSubmitted("cached");
      options_.observer->JobFinished(job, /*cached=*/true, clock_->Now());
    }
    // In memory until its DONE is durable (Deliver drops it), so SubmitAndWatch can follow it.
    JobState js;
    js.job = std::move(job);
    js.next_sequence = 3;
    js.finished = true;
    jobs_.emplace(out.job_id, std::move(js));
    return absl::OkStatus();
  }

  Persist(job, /*create=*/true, &queued, created);
  if (options_.observer) options_.observer->JobSubmitted("new");
  JobState js;
  js.next_sequence = 2;
  if (!job.request().no_cache()) inflight_by_key_[key] = job.job_id();
  queue_.push_back(job.job_id());
  js.job = std::move(job);
  jobs_.emplace(out.job_id, std::move(js));
  Dispatch();
  return absl::OkStatus();
}

v1::Job Scheduler::NewQueuedJob(v1::SubmitRequest request, const std::string& key,
                                int32_t problem_version, v1::EvalEvent* queued) {
  v1::Job job;
  job.set_job_id(NewJobId());
  job.set_job_key(key);
  job.set_source_sha256(Sha256Hex(request.source()));
  job.set_problem_version(problem_version);
  job.set_harness_version(options_.harness_version);
  job.set_stage(v1::QUEUED);
  job.set_created_unix_micros(NowMicros());
  job.set_updated_unix_micros(job.created_unix_micros());
  *job.mutable_request() = std::move(request);
  queued->set_job_id(job.job_id());
  queued->set_sequence(1);
  queued->set_stage(v1::QUEUED);
  queued->set_unix_micros(job.created_unix_micros());
  return job;
}

void Scheduler::FollowLocked(v1::SubmitRequest request, const std::string& key,
                             const v1::ProblemSpec* problem, JobState& leader, SubmitOutcome* out,
                             absl::Status* created) {
  v1::EvalEvent queued;
  v1::Job job = NewQueuedJob(std::move(request), key, problem->version(), &queued);
  job.set_cached_from_job_id(leader.job.job_id());
  queued.set_message(absl::StrCat("an identical job (", leader.job.job_id(),
                                  ") is being evaluated; this job shares its evaluation"));
  Persist(job, /*create=*/true, &queued, created);
  out->job_id = job.job_id();
  out->follows = true;
  JobState js;
  js.next_sequence = 2;
  js.leader = leader.job.job_id();
  leader.followers.push_back(job.job_id());
  js.job = std::move(job);
  jobs_.emplace(out->job_id, std::move(js));
}

void Scheduler::FinishFollower(JobState& fs, const v1::Job& leader, const std::string& message) {
  if (fs.finished) return;
  fs.finished = true;
  fs.leader.clear();
  v1::EvalResult result = leader.result();
  result.set_cached(true);
  result.set_job_key(fs.job.job_key());
  result.clear_confirmation_job_id();  // the leader's, not this copy's
  result.clear_shape_job_ids();
  fs.job.set_stage(v1::DONE);
  fs.job.set_cached_from_job_id(leader.job_id());
  fs.job.set_reported_by_worker(leader.reported_by_worker());
  fs.job.set_gpu_class(leader.gpu_class());
  *fs.job.mutable_result() = result;
  v1::EvalEvent event;
  *event.mutable_result() = result;
  Emit(fs, v1::DONE, absl::StrCat("shared the evaluation of job ", leader.job_id(), ": ", message),
       std::move(event));
  if (options_.observer) options_.observer->JobFinished(fs.job, /*cached=*/true, clock_->Now());
}

void Scheduler::PromoteFollowers(JobState& leader) {
  std::vector<std::string> followers = std::move(leader.followers);
  leader.followers.clear();
  JobState* head = nullptr;
  for (const std::string& id : followers) {
    auto it = jobs_.find(id);
    if (it == jobs_.end() || it->second.finished) continue;
    JobState& fs = it->second;
    if (head == nullptr) {
      head = &fs;
      fs.leader.clear();
      fs.job.clear_cached_from_job_id();
      fs.job.set_stage(v1::QUEUED);
      Emit(fs, v1::QUEUED,
           absl::StrCat("the job it shared (", leader.job.job_id(),
                        ") was cancelled by its submitter; queued on its own"),
           {});
      auto pos = std::find_if(queue_.begin(), queue_.end(), [&](const std::string& q) {
        auto j = jobs_.find(q);
        return j != jobs_.end() &&
               j->second.job.created_unix_micros() > fs.job.created_unix_micros();
      });
      queue_.insert(pos, id);
      if (!fs.job.request().no_cache()) inflight_by_key_[fs.job.job_key()] = id;
      continue;
    }
    fs.leader = head->job.job_id();
    fs.job.set_cached_from_job_id(head->job.job_id());
    head->followers.push_back(id);
    Emit(fs, fs.job.stage(), absl::StrCat("now shares the evaluation of job ", head->job.job_id()),
         {});
  }
}

void Scheduler::ExpireQueued(absl::Time now) {
  const int64_t cutoff = absl::ToUnixMicros(now - options_.queue_deadline);
  std::vector<std::string> expired;
  for (const std::string& id : queue_) {  // oldest first
    const v1::Job& job = jobs_.at(id).job;
    if (job.created_unix_micros() > cutoff) break;
    expired.push_back(id);
  }
  for (const std::string& id : expired) {
    const v1::Job& job = jobs_.at(id).job;
    v1::EvalResult result;
    result.set_status(v1::CANCELLED);
    result.set_message(absl::StrCat(
        "cancelled: no worker took it within the queue deadline (",
        absl::FormatDuration(options_.queue_deadline), "); none connected serves gpu class ",
        job.request().spec().gpu_class(), " at world size ", job.request().spec().world_size(),
        " with harness ", job.harness_version(), ", or all were busy"));
    Finish(id, result, result.message());
  }
}

absl::Status Scheduler::Watch(const std::string& job_id, int64_t after_sequence,
                              std::shared_ptr<EventSink> sink) {
  absl::MutexLock lock(&mu_);
  return WatchLocked(job_id, after_sequence, std::move(sink));
}

absl::Status Scheduler::WatchLocked(const std::string& job_id, int64_t after_sequence,
                                    std::shared_ptr<EventSink> sink) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    // Finished (or unknown): the store has the whole history, DONE last.
    PKB_RETURN_IF_ERROR(store_->GetJob(job_id).status());
  }
  // Watchers hear of an event only in Deliver (under this lock) once it is durable, so an event
  // is either in this replay or still to be delivered; last_sent drops the ones that are both
  // (committed, not yet delivered): no gap, no duplicate.
  PKB_ASSIGN_OR_RETURN(std::vector<v1::EvalEvent> history,
                       store_->ListEvents(job_id, after_sequence));
  for (const auto& e : history) sink->OnEvent(e);
  int64_t last_sent = history.empty() ? after_sequence : history.back().sequence();
  if (it != jobs_.end()) it->second.sinks.push_back(Watcher{std::move(sink), last_sent});
  return absl::OkStatus();
}

void Scheduler::Unwatch(const std::string& job_id, const EventSink* sink) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  auto& sinks = it->second.sinks;
  sinks.erase(std::remove_if(sinks.begin(), sinks.end(),
                             [&](const Watcher& w) { return w.sink.get() == sink; }),
              sinks.end());
}

absl::StatusOr<v1::Job> Scheduler::Get(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return store_->GetJob(job_id);
  v1::Job job = it->second.job;
  job.mutable_request()->clear_source();
  return job;
}

absl::StatusOr<v1::Job> Scheduler::Cancel(const std::string& job_id, const std::string& reason) {
  v1::Job answer;
  int64_t ticket;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) return store_->GetJob(job_id);  // finished: nothing to do
    JobState& js = it->second;
    if (!js.finished && !js.leader.empty()) {
      // A follower leaves the evaluation it shares; the leader runs on for its own submitter.
      auto l = jobs_.find(js.leader);
      if (l != jobs_.end()) {
        auto& f = l->second.followers;
        f.erase(std::remove(f.begin(), f.end(), job_id), f.end());
      }
      js.leader.clear();
    }
    if (!js.finished && !js.followers.empty()) PromoteFollowers(js);
    if (!js.finished) CancelLocked(js, reason);
    answer = it->second.job;
    answer.mutable_request()->clear_source();
    ticket = writes_queued_;
  }
  WaitForWrites(ticket);  // the cancellation is stored before the answer
  return answer;
}

absl::StatusOr<std::vector<std::string>> Scheduler::VoidWorker(const std::string& worker_id,
                                                               const std::string& reason) {
  if (worker_id.empty()) return absl::InvalidArgumentError("worker_id is empty");
  if (reason.empty()) return absl::InvalidArgumentError("reason is empty: say why, it is kept");
  // Finished jobs only (the store has them all; unfinished ones carry no report yet). A scan:
  // voiding is rare, and the store has no index on the reporting worker.
  JobQuery query;
  query.done_only = true;
  PKB_ASSIGN_OR_RETURN(std::vector<v1::Job> jobs, store_->ListJobs(query));
  std::vector<std::string> voided;
  for (v1::Job& job : jobs) {
    if (job.reported_by_worker() != worker_id || job.result().status() == v1::VOIDED) continue;
    v1::EvalResult* r = job.mutable_result();
    r->set_voided_status(r->status());
    r->set_voided_reason(reason);
    r->set_message(absl::StrCat("voided by an admin (", reason, "): worker ", worker_id,
                                " had reported ", v1::Status_Name(r->status()), ": ",
                                r->message()));
    r->set_status(v1::VOIDED);
    PKB_RETURN_IF_ERROR(store_->UpdateJob(job, nullptr));
    voided.push_back(job.job_id());
  }
  spdlog::warn("voided {} results reported by worker {}: {}", voided.size(), worker_id, reason);
  return voided;
}

void Scheduler::CancelLocked(JobState& js, const std::string& reason) {
  const std::string job_id = js.job.job_id();
  const v1::Job& job = js.job;
  if (!job.worker_id().empty()) {
    auto c = connection_of_worker_.find(job.worker_id());
    if (c != connection_of_worker_.end()) {
      v1::CoordinatorMessage m;
      m.mutable_cancel()->set_job_id(job_id);
      m.mutable_cancel()->set_reason(reason);
      workers_[c->second].connection->Send(m);
      // The worker stays busy until it answers with the lease's DONE event.
    }
  }
  v1::EvalResult result;
  result.set_status(v1::CANCELLED);
  result.set_message(absl::StrCat("cancelled: ", reason));
  Finish(job_id, result, result.message());
  Dispatch();
}

void Scheduler::Emit(JobState& js, v1::Stage stage, const std::string& message,
                     v1::EvalEvent event) {
  if (stage != v1::DONE) {
    // Followers see the evaluation they share as it happens.
    for (const std::string& id : js.followers) {
      auto f = jobs_.find(id);
      if (f == jobs_.end() || f->second.finished) continue;
      f->second.job.set_stage(stage);
      Emit(f->second, stage, message, event);
    }
  }
  event.set_job_id(js.job.job_id());
  event.set_sequence(js.next_sequence++);
  event.set_stage(stage);
  if (!message.empty()) event.set_message(message);
  event.set_attempt(js.job.attempts());
  event.set_unix_micros(NowMicros());
  js.job.set_updated_unix_micros(event.unix_micros());
  Persist(js.job, /*create=*/false, &event);
}

void Scheduler::Finish(const std::string& job_id, v1::EvalResult result,
                       const std::string& message) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || it->second.finished) return;
  JobState& js = it->second;
  js.finished = true;
  js.orphan_deadline = absl::InfiniteFuture();
  ClearAhead(js);
  // The engine reports the key its lease gave it; a verdict of the coordinator's own (cancelled,
  // expired, worker lost) has none yet.
  if (result.job_key().empty()) result.set_job_key(js.job.job_key());
  if (result.job_key() != js.job.job_key()) {
    spdlog::warn("job {}: the worker reported key {}, not the lease's {}", job_id, result.job_key(),
                 js.job.job_key());
  }
  result.set_cached(false);
  if (result.problem_id() == 0) result.set_problem_id(js.job.request().spec().problem_id());
  if (result.world_size() == 0) result.set_world_size(js.job.request().spec().world_size());
  if (result.harness_version().empty()) result.set_harness_version(js.job.harness_version());
  // The coordinator's to say, never the worker's.
  result.set_confirms_job_id(js.job.confirms_job_id());
  result.set_shape_run(js.job.shape_run());
  result.clear_confirmation_job_id();
  result.clear_shape_job_ids();
  js.job.set_stage(v1::DONE);
  js.job.set_worker_id("");
  *js.job.mutable_result() = result;
  std::string said = message;
  if (js.job.shape_run()) {
    said = absl::StrCat("shape run (m=", js.job.request().spec().m(),
                        ", n=", js.job.request().spec().n(), ") of job ", js.job.confirms_job_id(),
                        ": ", message);
  } else if (!js.job.confirms_job_id().empty()) {
    said = absl::StrCat("confirmation run of job ", js.job.confirms_job_id(), ": ", message);
  } else if (NeedsConfirmation(js.job)) {
    QueueConfirmation(js);  // stored before the DONE that names it
    absl::StrAppend(&said, "; confirmation run ", js.job.confirmation_job_id(), " queued");
    if (js.job.request().spec().ranked()) {
      absl::StrAppend(&said, QueueShapeRuns(js));  // likewise
    } else {
      absl::StrAppend(&said, ": the result ranks once that run is OK too");
    }
  }
  v1::EvalEvent event;
  *event.mutable_result() = js.job.result();
  Emit(js, v1::DONE, said, std::move(event));
  if (options_.observer) options_.observer->JobFinished(js.job, /*cached=*/false, clock_->Now());
  for (const std::string& id : js.followers) {
    auto f = jobs_.find(id);
    if (f != jobs_.end()) FinishFollower(f->second, js.job, message);
  }
  js.followers.clear();
  // Deliver drops it from jobs_ and the dedup map once DONE is durable; until then an identical
  // submission joins it and hears its DONE.
  queue_.erase(std::remove(queue_.begin(), queue_.end(), job_id), queue_.end());
}

void Scheduler::LoseLease(const std::string& job_id, const std::string& reason) {
  LogScope log_scope(job_id);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || it->second.finished) return;
  JobState& js = it->second;
  js.job.set_worker_id("");
  js.job.set_last_loss_reason(reason);
  js.orphan_deadline = absl::InfiniteFuture();
  spdlog::warn("job {}: lease {} lost: {}", job_id, js.job.attempts(), reason);
  if (options_.observer) options_.observer->LeaseLost();
  if (js.job.attempts() >= options_.max_attempts) {
    v1::EvalResult result;
    result.set_status(v1::WORKER_LOST);
    result.set_message(
        absl::StrCat("lost its worker on all ", js.job.attempts(),
                     " attempts (a submission that kills workers ends here); last: ", reason));
    Finish(job_id, result, result.message());
    return;
  }
  js.job.set_stage(v1::QUEUED);
  Emit(js, v1::QUEUED,
       absl::StrCat("back in the queue after attempt ", js.job.attempts(), " of ",
                    options_.max_attempts, ": ", reason),
       {});
  // Oldest first: a requeued job goes ahead of the jobs submitted after it.
  auto pos = std::find_if(queue_.begin(), queue_.end(), [&](const std::string& id) {
    auto j = jobs_.find(id);
    return j != jobs_.end() && j->second.job.created_unix_micros() > js.job.created_unix_micros();
  });
  queue_.insert(pos, job_id);
}

}  // namespace pkb
