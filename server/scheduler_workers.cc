// The scheduler's worker half: matching jobs to workers, dispatch, and the worker stream's
// messages (register, heartbeats, job events, drain, disconnect) and lease expiry. The job half
// (submit, watch, cancel, finish, recovery) is in scheduler.cc; both implement server/scheduler.h.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/scheduler.h"
#include "spdlog/spdlog.h"

namespace pkb {

namespace {

// The largest W a worker takes for a job: functional jobs' ranks may share its GPUs.
int32_t MaxWorld(const v1::WorkerCapabilities& caps, bool functional) {
  return functional ? std::max(caps.max_world_size(), caps.max_functional_world_size())
                    : caps.max_world_size();
}

}  // namespace

bool Scheduler::Matches(const v1::WorkerCapabilities& caps, const v1::Job& job) {
  const auto& r = job.request().spec();
  if (r.world_size() > MaxWorld(caps, r.functional())) return false;
  if (r.gpu_class() != "any" && r.gpu_class() != caps.gpu_class()) return false;
  return caps.harness_version() == job.harness_version();
}

bool Scheduler::AnyConnectedCanRun(const v1::Job& job) const {
  const auto& r = job.request().spec();
  auto fits = [&](const std::multiset<std::pair<int32_t, int32_t>>& limits) {
    if (!r.functional()) return !limits.empty() && limits.rbegin()->first >= r.world_size();
    return std::any_of(limits.begin(), limits.end(),
                       [&](const auto& l) { return l.second >= r.world_size(); });
  };
  if (r.gpu_class() != "any") {
    auto it = connected_.find({job.harness_version(), r.gpu_class()});
    return it != connected_.end() && fits(it->second);
  }
  for (auto it = connected_.lower_bound({job.harness_version(), ""});
       it != connected_.end() && it->first.first == job.harness_version(); ++it) {
    if (fits(it->second)) return true;
  }
  return false;
}

bool Scheduler::AnotherConnectedCanRun(const v1::Job& job, const std::string& worker_id) const {
  if (!connection_of_worker_.count(worker_id)) return AnyConnectedCanRun(job);
  // It is connected and counted among them: another one means two that can.
  const auto& r = job.request().spec();
  int capable = 0;
  auto count = [&](const std::multiset<std::pair<int32_t, int32_t>>& limits) {
    for (const auto& l : limits) {
      if ((r.functional() ? l.second : l.first) >= r.world_size() && ++capable >= 2) return;
    }
  };
  if (r.gpu_class() != "any") {
    auto it = connected_.find({job.harness_version(), r.gpu_class()});
    if (it != connected_.end()) count(it->second);
    return capable >= 2;
  }
  for (auto it = connected_.lower_bound({job.harness_version(), ""});
       it != connected_.end() && it->first.first == job.harness_version() && capable < 2; ++it) {
    count(it->second);
  }
  return capable >= 2;
}

std::optional<uint64_t> Scheduler::Pick(const WorkerIndex& index, const JobState& js) const {
  const v1::Job& job = js.job;
  const auto& r = job.request().spec();
  const bool avoid = !js.avoid_worker.empty() && AnotherConnectedCanRun(job, js.avoid_worker);
  std::optional<std::pair<int32_t, uint64_t>> best;
  auto consider = [&](const std::set<std::pair<int32_t, uint64_t>>& idle) {
    if (r.functional()) {
      // The smallest node that takes it (ranks share its GPUs): big ones stay free for the rest.
      for (const auto& w : idle) {
        if (MaxWorld(workers_.at(w.second).caps, true) < r.world_size()) continue;
        if (!best || w < *best) best = w;
        break;
      }
      return;
    }
    auto w = idle.lower_bound({r.world_size(), 0});
    // The avoided worker is skipped: one idle worker at most, so this walks at most two.
    while (avoid && w != idle.end() && workers_.at(w->second).worker_id == js.avoid_worker) ++w;
    if (w != idle.end() && (!best || *w < *best)) best = *w;
  };
  if (r.gpu_class() != "any") {
    auto it = index.find({job.harness_version(), r.gpu_class()});
    if (it != index.end()) consider(it->second);
  } else {
    for (auto it = index.lower_bound({job.harness_version(), ""});
         it != index.end() && it->first.first == job.harness_version(); ++it) {
      consider(it->second);
    }
  }
  if (!best) return std::nullopt;
  return best->second;
}

void Scheduler::Reindex(uint64_t connection_id, WorkerState& w) {
  const CapsKey key = KeyOf(w.caps);
  const std::pair<int32_t, uint64_t> entry{w.caps.max_world_size(), connection_id};
  auto place = [&](WorkerIndex& index, bool in, bool& indexed) {
    if (in == indexed) return;
    if (in) {
      index[key].insert(entry);
    } else {
      auto it = index.find(key);
      it->second.erase(entry);
      if (it->second.empty()) index.erase(it);
    }
    indexed = in;
  };
  if ((!w.healthy || w.draining) && !w.ahead_jobs.empty()) {
    // It takes no job now: the ones it compiled ahead go back to the queue's order, free to be
    // compiled ahead elsewhere.
    DropAheadMarks(connection_id, w);
    ahead_dirty_ = true;
  }
  const bool was_idle = w.indexed;
  const bool idle = w.healthy && !w.draining && !w.finishing && w.job_id.empty();
  place(idle_, idle, w.indexed);
  if (idle != was_idle) idle_count_ += idle ? 1 : -1;
  if (idle && !was_idle && !w.ahead_jobs.empty()) ahead_ready_.push_back(connection_id);
  const int depth = AheadDepth(w.caps);
  const bool takes_ahead = options_.compile_ahead && w.healthy && !w.draining &&
                           (w.finishing || !w.job_id.empty()) &&
                           static_cast<int>(w.ahead_jobs.size()) < depth &&
                           w.ahead_compiles < depth && w.compiles < w.caps.compile_slots();
  const int level = takes_ahead ? static_cast<int>(w.ahead_jobs.size()) : -1;
  if (level != w.ahead_level) {
    if (level >= 0 && w.ahead_level < 0) ahead_dirty_ = true;
    if (w.ahead_level >= 0) {
      bool in = true;
      place(ahead_free_[w.ahead_level], false, in);
      --ahead_free_count_;
    }
    if (level >= 0) {
      if (static_cast<size_t>(level) >= ahead_free_.size()) ahead_free_.resize(level + 1);
      bool in = false;
      place(ahead_free_[level], true, in);
      ++ahead_free_count_;
    }
    w.ahead_level = level;
  }
}

bool Scheduler::CanTake(const WorkerState& w, const JobState& js) const {
  if (!Matches(w.caps, js.job)) return false;
  return js.avoid_worker != w.worker_id || !AnotherConnectedCanRun(js.job, w.worker_id);
}

void Scheduler::LeaseTo(JobState& js, uint64_t connection_id) {
  WorkerState* chosen = &workers_.at(connection_id);
  ClearAhead(js);
  v1::Job& job = js.job;
  job.set_attempts(job.attempts() + 1);
  job.set_worker_id(chosen->worker_id);
  job.set_gpu_class(chosen->caps.gpu_class());
  chosen->job_id = job.job_id();
  chosen->attempt = job.attempts();
  Reindex(connection_id, *chosen);
  Emit(js, v1::QUEUED,
       absl::StrCat("leased to worker ", chosen->worker_id, " (", chosen->caps.gpu_class(),
                    ", attempt ", job.attempts(), ")"),
       {});
  v1::CoordinatorMessage m;
  v1::Lease* lease = m.mutable_lease();
  const auto& r = job.request().spec();
  lease->set_job_id(job.job_id());
  lease->set_attempt(job.attempts());
  *lease->mutable_spec() = r;
  if (r.ranked()) {
    lease->mutable_spec()->set_set_offset(JobSetOffset(options_.secret_set_offset, job.job_id()));
  }
  lease->set_source(job.request().source());
  lease->set_job_key(job.job_key());
  lease->set_deadline_ms(absl::ToInt64Milliseconds(options_.job_deadline));
  chosen->connection->Send(m);
}

void Scheduler::LeaseAheadJobs() {
  std::vector<uint64_t> ready;
  ready.swap(ahead_ready_);
  for (uint64_t conn : ready) {
    auto w = workers_.find(conn);
    if (w == workers_.end() || !w->second.indexed || w->second.ahead_jobs.empty()) continue;
    // The oldest queued job compiled ahead on it that it can take (a confirmation may have been
    // marked on the worker it avoids while no other could run it). The older jobs it could run
    // are passed over, each once at most: one that was passed over already goes first (Dispatch's
    // queue order), whatever this worker compiled. The walk ends at its last mark.
    std::vector<JobState*> passed;
    bool overdue = false;
    size_t marks_left = w->second.ahead_jobs.size();
    auto q = queue_.begin();
    for (; q != queue_.end(); ++q) {
      JobState& js = jobs_.at(*q);
      const bool mine = js.ahead_conn == conn;
      if (CanTake(w->second, js)) {
        if (mine) break;
        if (js.passed_over) {
          overdue = true;
          break;
        }
        passed.push_back(&js);
      } else if (mine && --marks_left == 0) {
        q = queue_.end();
        break;
      }
    }
    if (overdue || q == queue_.end()) continue;
    for (JobState* older : passed) older->passed_over = true;
    JobState& js = jobs_.at(*q);
    queue_.erase(q);
    spdlog::info("job {}: leased to worker {}, which compiled it ahead", js.job.job_id(),
                 w->second.worker_id);
    LeaseTo(js, conn);
  }
}

void Scheduler::ClearAhead(JobState& js) {
  if (js.ahead_conn == 0) return;
  auto w = workers_.find(js.ahead_conn);
  js.ahead_conn = 0;
  if (w == workers_.end()) return;
  std::vector<std::string>& marks = w->second.ahead_jobs;
  auto mark = std::find(marks.begin(), marks.end(), js.job.job_id());
  if (mark == marks.end()) return;
  marks.erase(mark);
  Reindex(w->first, w->second);
}

void Scheduler::DropAheadMarks(uint64_t connection_id, WorkerState& w) {
  for (const std::string& id : w.ahead_jobs) {
    auto j = jobs_.find(id);
    if (j != jobs_.end() && j->second.ahead_conn == connection_id) j->second.ahead_conn = 0;
  }
  w.ahead_jobs.clear();
}

int Scheduler::AheadDepth(const v1::WorkerCapabilities& caps) {
  return caps.compile_slots() >= 2 ? caps.compile_slots() - 1 : caps.compile_slots();
}

void Scheduler::CompileAhead() {
  ahead_dirty_ = false;
  int looked = 0;
  for (auto q = queue_.begin();
       q != queue_.end() && ahead_free_count_ > 0 && looked < kAheadLookahead; ++q, ++looked) {
    JobState& js = jobs_.at(*q);
    if (js.ahead_conn != 0) continue;
    // A worker with the fewest marks that could run it.
    std::optional<uint64_t> conn;
    for (size_t level = 0; level < ahead_free_.size() && !conn; ++level)
      conn = Pick(ahead_free_[level], js);
    if (!conn) continue;
    WorkerState& w = workers_.at(*conn);
    const std::string job_id = js.job.job_id();
    w.ahead_jobs.push_back(job_id);
    js.ahead_conn = *conn;
    const std::string task_id =
        SendCompile(*conn, w, js.job.request().spec(), js.job.request().source(), /*ahead=*/true,
                    [job_id](CompileAnswer answer) {
                      // Nobody waits for it: the cache keeps what it made, and the job's own
                      // compile says the rest.
                      if (!answer.status.ok()) {
                        spdlog::info("job {}: its compile ahead did not run: {}", job_id,
                                     std::string(answer.status.message()));
                      }
                    });
    spdlog::info("job {}: compiled ahead on worker {} (compile task {}) while it waits", job_id,
                 w.worker_id, task_id);
  }
}

void Scheduler::Dispatch() {
  LeaseAheadJobs();
  for (auto q = queue_.begin(); q != queue_.end() && idle_count_ > 0;) {
    JobState& js = jobs_.at(*q);
    std::optional<uint64_t> conn = Pick(idle_, js);
    if (!conn) {
      ++q;
      continue;
    }
    q = queue_.erase(q);
    LeaseTo(js, *conn);
  }
  if (options_.compile_ahead) CompileAhead();
}

absl::Status Scheduler::Connect(uint64_t connection_id, const v1::Register& reg,
                                std::shared_ptr<WorkerConnection> connection) {
  if (reg.worker_id().empty()) return absl::InvalidArgumentError("Register.worker_id is empty");
  absl::MutexLock lock(&mu_);
  absl::Time now = clock_->Now();
  auto old = connection_of_worker_.find(reg.worker_id());
  if (old != connection_of_worker_.end() && old->second != connection_id) {
    // The same worker on a new stream: the old one is dead, whether or not we noticed yet.
    uint64_t old_conn = old->second;
    auto ow = workers_.find(old_conn);
    if (ow != workers_.end()) {
      ow->second.connection->Close(
          absl::AbortedError("replaced by a newer stream of the same worker"));
      if (!ow->second.job_id.empty()) {
        auto j = jobs_.find(ow->second.job_id);
        if (j != jobs_.end()) j->second.orphan_deadline = now + options_.lease_timeout;
      }
      DropWorker(old_conn);
    }
  }
  DropWorker(connection_id);  // a second Register on one stream replaces the first
  WorkerState& w = workers_[connection_id];
  w.worker_id = reg.worker_id();
  w.caps = reg.capabilities();
  w.connection = std::move(connection);
  w.last_heard = now;
  w.healthy = reg.healthy();
  w.finishing = reg.finishing();
  connection_of_worker_[w.worker_id] = connection_id;
  connected_[KeyOf(w.caps)].insert(
      {w.caps.max_world_size(), MaxWorld(w.caps, /*functional=*/true)});

  v1::CoordinatorMessage ack_msg;
  v1::RegisterAck* ack = ack_msg.mutable_register_ack();
  ack->set_heartbeat_interval_ms(absl::ToInt64Milliseconds(options_.heartbeat_interval));
  ack->set_lease_timeout_ms(absl::ToInt64Milliseconds(options_.lease_timeout));
  // Resume what it still runs and we still lease to it; stop the rest.
  for (const std::string& id : reg.running_job_ids()) {
    auto j = jobs_.find(id);
    if (j != jobs_.end() && j->second.job.worker_id() == w.worker_id && w.job_id.empty()) {
      w.job_id = id;
      w.attempt = j->second.job.attempts();
      j->second.orphan_deadline = absl::InfiniteFuture();
      spdlog::info("worker {} resumed job {}", w.worker_id, id);
    } else {
      ack->add_cancel_job_ids(id);
    }
  }
  Reindex(connection_id, w);
  w.connection->Send(ack_msg);
  std::vector<std::string> lost;
  for (const auto& [id, js] : jobs_) {
    if (js.job.worker_id() == w.worker_id && id != w.job_id) lost.push_back(id);
  }
  for (const auto& id : lost)
    LoseLease(id, absl::StrCat("worker ", w.worker_id, " reconnected without it"));
  spdlog::info("worker {} connected: {} x{} (max W {}), {}", w.worker_id, w.caps.gpu_class(),
               w.caps.gpu_count(), w.caps.max_world_size(),
               w.healthy ? "healthy" : "unhealthy: " + reg.unhealthy_reason());
  Dispatch();
  return absl::OkStatus();
}

absl::Status Scheduler::OnHeartbeat(uint64_t connection_id, const v1::Heartbeat& heartbeat) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(connection_id);
  if (it == workers_.end())
    return absl::FailedPreconditionError("not registered (or expired): reconnect");
  WorkerState& w = it->second;
  w.last_heard = clock_->Now();
  const bool was_idle = w.indexed;
  w.healthy = heartbeat.healthy();
  w.finishing = heartbeat.finishing();
  Reindex(connection_id, w);
  v1::CoordinatorMessage m;
  m.mutable_heartbeat_ack()->set_deadline_unix_micros(
      absl::ToUnixMicros(w.last_heard + options_.lease_timeout));
  w.connection->Send(m);
  if (!was_idle && w.indexed) {
    Dispatch();
  } else if (ahead_dirty_) {
    CompileAhead();  // unhealthy: its compile-ahead mark went back to the queue
  }
  return absl::OkStatus();
}

absl::Status Scheduler::OnJobEvent(uint64_t connection_id, const v1::JobEvent& je) {
  absl::MutexLock lock(&mu_);
  auto wit = workers_.find(connection_id);
  if (wit == workers_.end())
    return absl::FailedPreconditionError("not registered (or expired): reconnect");
  WorkerState& w = wit->second;
  LogScope log_scope(je.job_id(), w.worker_id);
  w.last_heard = clock_->Now();
  const bool done = je.event().stage() == v1::DONE;
  const bool own_lease = w.job_id == je.job_id() && w.attempt == je.attempt();
  if (own_lease && done) {
    w.job_id.clear();  // the lease ends with its DONE event, cancelled or not
    Reindex(connection_id, w);
  }
  auto jit = jobs_.find(je.job_id());
  if (!own_lease || jit == jobs_.end() || jit->second.job.worker_id() != w.worker_id ||
      jit->second.job.attempts() != je.attempt()) {
    // A lease we took back (expired, cancelled, finished): its events are stale.
    if (done) Dispatch();
    return absl::OkStatus();
  }
  JobState& js = jit->second;
  if (done) {
    v1::EvalResult result = je.event().result();
    if (result.status() == v1::STATUS_UNSPECIFIED) {
      result.set_status(v1::INTERNAL);
      if (result.message().empty())
        result.set_message("the worker sent a DONE event without a verdict");
    } else if (result.status() == v1::COMPILED) {
      // A compile task's verdict is no job's: the job did not run.
      result.set_status(v1::INTERNAL);
      result.set_message("the worker answered a job with a compile-only verdict (COMPILED)");
    }
    std::string message = je.event().message().empty() ? result.message() : je.event().message();
    js.job.set_reported_by_worker(w.worker_id);
    Finish(je.job_id(), std::move(result), message);
    Dispatch();
    return absl::OkStatus();
  }
  v1::Stage stage = je.event().stage();
  if (stage == v1::STAGE_UNSPECIFIED || stage == v1::QUEUED) stage = js.job.stage();
  js.job.set_stage(stage);
  v1::EvalEvent e = je.event();
  e.clear_result();
  Emit(js, stage, "", std::move(e));
  return absl::OkStatus();
}

absl::Status Scheduler::OnDrain(uint64_t connection_id, const v1::Drain& drain) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(connection_id);
  if (it == workers_.end())
    return absl::FailedPreconditionError("not registered (or expired): reconnect");
  it->second.draining = true;
  it->second.last_heard = clock_->Now();
  Reindex(connection_id, it->second);
  if (ahead_dirty_) CompileAhead();  // its compile-ahead mark went back to the queue
  spdlog::info("worker {} drains: {}", it->second.worker_id, drain.reason());
  return absl::OkStatus();
}

void Scheduler::DropWorker(uint64_t connection_id) {
  auto it = workers_.find(connection_id);
  if (it == workers_.end()) return;
  WorkerState& w = it->second;
  for (auto t = compile_tasks_.begin(); t != compile_tasks_.end();) {
    auto next = std::next(t);
    if (t->second.connection_id == connection_id) {
      AnswerCompile(
          t, {absl::UnavailableError(absl::StrCat(
                  "worker ", w.worker_id, " was lost before it answered; nothing was compiled")),
              {},
              w.worker_id});
    }
    t = next;
  }
  DropAheadMarks(connection_id, w);
  w.healthy = false;
  Reindex(connection_id, w);
  auto caps = connected_.find(KeyOf(w.caps));
  caps->second.erase(
      caps->second.find({w.caps.max_world_size(), MaxWorld(w.caps, /*functional=*/true)}));
  if (caps->second.empty()) connected_.erase(caps);
  auto c = connection_of_worker_.find(it->second.worker_id);
  if (c != connection_of_worker_.end() && c->second == connection_id)
    connection_of_worker_.erase(c);
  workers_.erase(it);
}

void Scheduler::Disconnect(uint64_t connection_id, const std::string& reason) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(connection_id);
  if (it == workers_.end()) return;
  WorkerState& w = it->second;
  spdlog::info("worker {} disconnected: {}", w.worker_id, reason);
  if (!w.job_id.empty()) {
    auto j = jobs_.find(w.job_id);
    if (j != jobs_.end() && j->second.job.worker_id() == w.worker_id) {
      // Give it one lease timeout to reconnect and resume before the job is queued again.
      j->second.orphan_deadline = clock_->Now() + options_.lease_timeout;
    }
  }
  DropWorker(connection_id);
  Dispatch();  // a confirmation that avoided an idle worker may now take it
}

void Scheduler::Tick() {
  WritingLock lock(this);
  absl::Time now = clock_->Now();
  std::vector<uint64_t> silent;
  for (const auto& [conn, w] : workers_) {
    if (now - w.last_heard > options_.lease_timeout) silent.push_back(conn);
  }
  for (uint64_t conn : silent) {
    WorkerState& w = workers_.at(conn);
    std::string worker = w.worker_id, job = w.job_id;
    w.connection->Close(absl::DeadlineExceededError("missed the heartbeat deadline"));
    DropWorker(conn);
    if (!job.empty()) {
      LoseLease(job, absl::StrCat("worker ", worker, " missed its heartbeat deadline (",
                                  absl::FormatDuration(options_.lease_timeout), ")"));
    }
  }
  ExpireQueued(now);
  for (auto t = compile_tasks_.begin(); t != compile_tasks_.end();) {
    auto next = std::next(t);
    if (t->second.deadline <= now) {
      const std::string worker = t->second.worker_id;
      AnswerCompile(t, {absl::DeadlineExceededError(
                            absl::StrCat("worker ", worker, " did not answer within ",
                                         absl::FormatDuration(options_.compile_deadline))),
                        {},
                        worker});
    }
    t = next;
  }
  std::vector<std::string> orphans;
  for (const auto& [id, js] : jobs_) {
    if (js.orphan_deadline <= now) orphans.push_back(id);
  }
  for (const auto& id : orphans) {
    LoseLease(id, absl::StrCat("worker ", jobs_.at(id).job.worker_id(),
                               " went away and did not come back within ",
                               absl::FormatDuration(options_.lease_timeout)));
  }
  if (!silent.empty() || !orphans.empty()) {
    Dispatch();
  } else if (ahead_dirty_) {
    CompileAhead();  // a compile answered by its deadline, a queued job expired
  }
}

void Scheduler::StartCompile(const v1::EvalSpec& spec, const std::string& source,
                             CompileDone done) {
  absl::MutexLock lock(&mu_);
  // A walk of the fleet: compile tasks are few, and the idle index serves jobs, not them.
  const bool cuda = spec.language() != "cpp";
  WorkerState* best = nullptr;
  uint64_t best_conn = 0;
  int capable = 0;
  for (auto& [conn, w] : workers_) {
    if (w.caps.compile_slots() <= 0 || !w.healthy || w.draining) continue;
    if (w.caps.harness_version() != options_.harness_version) continue;
    if (spec.gpu_class() != "any" && spec.gpu_class() != w.caps.gpu_class()) continue;
    ++capable;
    if (w.compiles >= w.caps.compile_slots() * options_.compile_tasks_per_slot) continue;
    // The least loaded; among equals, for CUDA, a GPU node (its nvcc is the one jobs use).
    auto load = [](const WorkerState& x) {
      return static_cast<double>(x.compiles) / x.caps.compile_slots();
    };
    const bool gpu = w.caps.gpu_class() != "cpu";
    if (best == nullptr || load(w) < load(*best) ||
        (load(w) == load(*best) && cuda && gpu && best->caps.gpu_class() == "cpu")) {
      best = &w;
      best_conn = conn;
    }
  }
  if (best == nullptr) {
    const std::string what = absl::StrCat(spec.language(), " for gpu class ", spec.gpu_class());
    done({absl::UnavailableError(
              capable == 0
                  ? absl::StrCat("no connected worker compiles ", what,
                                 " (none with compile slots, healthy and not draining, harness ",
                                 options_.harness_version, ")")
                  : absl::StrCat("every worker that compiles ", what, " is busy; retry soon")),
          {},
          ""});
    return;
  }
  SendCompile(best_conn, *best, spec, source, /*ahead=*/false, std::move(done));
}

std::string Scheduler::SendCompile(uint64_t connection_id, WorkerState& w, const v1::EvalSpec& spec,
                                   const std::string& source, bool ahead, CompileDone done) {
  const std::string task_id = absl::StrFormat("c%x-%06x-%04x", NowMicros(),
                                              ++compile_counter_ & 0xffffff, id_salt_ & 0xffff);
  v1::CoordinatorMessage m;
  v1::CompileTask* task = m.mutable_compile();
  task->set_task_id(task_id);
  *task->mutable_spec() = spec;
  task->set_source(source);
  task->set_deadline_ms(absl::ToInt64Milliseconds(options_.compile_deadline));
  task->set_ahead(ahead);
  ++w.compiles;
  if (ahead) ++w.ahead_compiles;
  Reindex(connection_id, w);
  compile_tasks_[task_id] = {connection_id, w.worker_id, clock_->Now() + options_.compile_deadline,
                             ahead, std::move(done)};
  spdlog::info("compile task {} ({}) sent to worker {}", task_id, spec.language(), w.worker_id);
  w.connection->Send(m);
  return task_id;
}

absl::Status Scheduler::OnCompileResult(uint64_t connection_id,
                                        const v1::CompileTaskResult& result) {
  absl::MutexLock lock(&mu_);
  auto wit = workers_.find(connection_id);
  if (wit == workers_.end())
    return absl::FailedPreconditionError("not registered (or expired): reconnect");
  wit->second.last_heard = clock_->Now();
  auto t = compile_tasks_.find(result.task_id());
  // Answered already (its deadline passed), or another stream's: stale.
  if (t == compile_tasks_.end() || t->second.connection_id != connection_id)
    return absl::OkStatus();
  v1::EvalResult r = result.result();
  if (r.status() == v1::STATUS_UNSPECIFIED) {
    r.set_status(v1::INTERNAL);
    if (r.message().empty()) r.set_message("the worker answered a compile task without a verdict");
  }
  AnswerCompile(t, {absl::OkStatus(), std::move(r), wit->second.worker_id});
  if (ahead_dirty_) CompileAhead();  // a slot it held may take a job ahead now
  return absl::OkStatus();
}

void Scheduler::AbandonCompiles(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  while (!compile_tasks_.empty()) {
    auto t = compile_tasks_.begin();
    const std::string worker = t->second.worker_id;
    AnswerCompile(t, {absl::UnavailableError(reason), {}, worker});
  }
}

void Scheduler::AnswerCompile(std::map<std::string, CompileTaskState>::iterator task,
                              CompileAnswer answer) {
  auto w = workers_.find(task->second.connection_id);
  if (w != workers_.end()) {
    --w->second.compiles;
    if (task->second.ahead) --w->second.ahead_compiles;
    Reindex(w->first, w->second);
  }
  CompileDone done = std::move(task->second.done);
  compile_tasks_.erase(task);
  done(std::move(answer));
}

SchedulerStats Scheduler::Stats() {
  absl::MutexLock lock(&mu_);
  SchedulerStats s;
  s.queued = queue_.size();
  for (const auto& [id, js] : jobs_) s.leased += !js.finished && !js.job.worker_id().empty();
  s.workers = workers_.size();
  s.idle_workers = idle_count_;
  for (const auto& [id, js] : jobs_) s.watchers += js.sinks.size();
  for (const auto& [id, w] : workers_) s.unhealthy_workers += !w.healthy;
  return s;
}

}  // namespace pkb
