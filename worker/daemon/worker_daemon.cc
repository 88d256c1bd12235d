#include "worker/daemon/worker_daemon.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <random>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "spdlog/spdlog.h"

namespace pkb {

namespace {

// A child that waits for the end of a pipe whose write end only this process holds (close on
// exec), then sends SIGCONT to `pids`: at the close, or at this process's death. Its write end,
// and the child, for EndStopGuard; {-1, -1} where no child could start.
std::pair<int, pid_t> StartStopGuard(const std::vector<pid_t>& pids) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return {-1, -1};
  const pid_t child = fork();
  if (child == 0) {
    // Async-signal-safe calls only: this process has other threads.
    close(fds[1]);
    char byte;
    while (read(fds[0], &byte, 1) < 0 && errno == EINTR) {
    }
    for (pid_t pid : pids) kill(pid, SIGCONT);
    _exit(0);
  }
  close(fds[0]);
  if (child < 0) {
    close(fds[1]);
    return {-1, -1};
  }
  return {fds[1], child};
}

void EndStopGuard(int fd, pid_t child) {
  if (fd >= 0) close(fd);
  if (child > 0) {
    while (waitpid(child, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

}  // namespace

WorkerDaemon::WorkerDaemon(WorkerDaemonOptions options, Executor* executor)
    : options_(std::move(options)), executor_(executor) {
  healthy_ = options_.healthy;
  unhealthy_reason_ = options_.unhealthy_reason;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(4 << 20);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (!options_.tls_ca.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options_.tls_ca;
    creds = grpc::SslCredentials(ssl);
  }
  channel_ = grpc::CreateCustomChannel(options_.coordinator, creds, args);
  stub_ = v1::Worker::NewStub(channel_);
  for (int i = 0; i < options_.capabilities.compile_slots(); ++i)
    compile_threads_.emplace_back([this] { CompileLoop(); });
}

WorkerDaemon::~WorkerDaemon() {
  {
    absl::MutexLock lock(&compile_mu_);
    compile_stop_ = true;
    for (auto& c : compiles_running_) c.cancel->Cancel();
    EndStopGuard(stop_guard_fd_, stop_guard_pid_);
  }
  for (std::thread& t : compile_threads_) t.join();
  if (job_thread_.joinable()) job_thread_.join();
}

void WorkerDaemon::QueueCompile(v1::CompileTask task) {
  // The coordinator sends a worker a few tasks per slot at most; this bounds a confused one.
  constexpr size_t kMaxQueued = 64;
  bool draining = false;
  {
    absl::MutexLock lock(&compile_mu_);
    draining = task.ahead() && (ahead_stopped_ || drain_requested_);
    if (!draining && !compile_threads_.empty() && compile_queue_.size() < kMaxQueued) {
      compile_queue_.push_back(std::move(task));
      ++compiles_busy_;
      return;
    }
  }
  if (draining) {
    spdlog::info("draining: compile task {} (ahead) not run", task.task_id());
    AnswerCompileTask(task.task_id(), v1::CANCELLED, "the worker drains: no compile ahead");
    return;
  }
  AnswerCompileTask(task.task_id(), v1::INTERNAL,
                    compile_threads_.empty()
                        ? "this worker takes no compile tasks (--compile-slots 0)"
                        : "this worker's compile queue is full");
}

void WorkerDaemon::AnswerCompileTask(const std::string& task_id, v1::Status status,
                                     const std::string& message) {
  v1::WorkerMessage m;
  m.mutable_compile_result()->set_task_id(task_id);
  m.mutable_compile_result()->mutable_result()->set_status(status);
  m.mutable_compile_result()->mutable_result()->set_message(message);
  Send(m);
}

void WorkerDaemon::BeginJobCompiles(const std::string& source) {
  absl::MutexLock lock(&compile_mu_);
  job_compiles_counted_ = true;
  job_source_ = source;
  ++job_generation_;
  compiles_beside_job_ = 0;
  for (auto& c : compiles_running_) {
    if (c.ahead && c.source == source) continue;
    ++compiles_beside_job_;
    c.counted_in = job_generation_;
  }
}

int WorkerDaemon::CompilesBesideJob() {
  absl::MutexLock lock(&compile_mu_);
  return compiles_beside_job_;
}

void WorkerDaemon::PauseCompiles(bool paused) {
  absl::MutexLock lock(&compile_mu_);
  if (!paused) job_compiles_counted_ = false;  // the verdict: the job's count is over
  if (compiles_paused_ == paused) return;
  compiles_paused_ = paused;
  std::vector<pid_t> stopped;
  for (auto& c : compiles_running_) {
    for (pid_t pid : c.cancel->Pause(paused)) stopped.push_back(pid);
  }
  if (paused && !stopped.empty()) {
    std::tie(stop_guard_fd_, stop_guard_pid_) = StartStopGuard(stopped);
  } else if (!paused) {
    EndStopGuard(stop_guard_fd_, stop_guard_pid_);
    stop_guard_fd_ = -1;
    stop_guard_pid_ = -1;
  }
  if (!compiles_running_.empty() || !compile_queue_.empty()) {
    spdlog::info("{} compile task(s) {}, {} waiting", compiles_running_.size(),
                 paused ? "stopped while the job is timed" : "resumed at the verdict",
                 compile_queue_.size());
  }
}

void WorkerDaemon::StopAheadCompiles() {
  std::vector<std::string> dropped;
  int stopped = 0;
  {
    absl::MutexLock lock(&compile_mu_);
    ahead_stopped_ = true;
    for (auto t = compile_queue_.begin(); t != compile_queue_.end();) {
      if (!t->ahead()) {
        ++t;
        continue;
      }
      dropped.push_back(t->task_id());
      t = compile_queue_.erase(t);
    }
    for (auto& c : compiles_running_) {
      if (!c.ahead) continue;
      c.cancel->Cancel();  // its answer, CANCELLED, goes out as any other
      ++stopped;
    }
  }
  if (stopped > 0 || !dropped.empty()) {
    spdlog::info("draining: {} compile(s) ahead stopped, {} queued one(s) dropped", stopped,
                 dropped.size());
  }
  for (const std::string& id : dropped) {
    AnswerCompileTask(id, v1::CANCELLED, "the worker drains: no compile ahead");
    --compiles_busy_;
  }
}

void WorkerDaemon::CompileLoop() {
  while (true) {
    v1::CompileTask task;
    auto cancel = std::make_shared<CancelToken>();
    {
      absl::MutexLock lock(&compile_mu_);
      compile_mu_.Await(absl::Condition(this, &WorkerDaemon::CompileReadyLocked));
      if (compile_stop_) return;
      // A Check's caller waits: its task goes before compiles ahead, which nobody waits for.
      auto next = std::find_if(compile_queue_.begin(), compile_queue_.end(),
                               [](const v1::CompileTask& t) { return !t.ahead(); });
      if (next == compile_queue_.end()) next = compile_queue_.begin();
      task = std::move(*next);
      compile_queue_.erase(next);
      compiles_running_.push_back(
          {task.ahead(), cancel, task.ahead() ? task.source() : std::string()});
      if (job_compiles_counted_ && !(task.ahead() && task.source() == job_source_)) {
        ++compiles_beside_job_;
        compiles_running_.back().counted_in = job_generation_;
      }
    }
    LogScope log_scope(task.task_id());
    const absl::Time started = absl::Now();
    v1::EvalResult result = executor_->Compile(task, cancel.get());
    cancel->Finish();  // a pause meanwhile waits for its process no more
    spdlog::info("compile task {}: {} in {}", task.task_id(), v1::Status_Name(result.status()),
                 absl::FormatDuration(absl::Now() - started));
    {
      absl::MutexLock lock(&compile_mu_);
      auto it = std::find_if(compiles_running_.begin(), compiles_running_.end(),
                             [&](const RunningCompile& c) { return c.cancel == cancel; });
      // Found in the cache, it ran no compiler: nothing of this task was beside the job that
      // still counts it.
      if (result.compile().cache_hit() && job_compiles_counted_ &&
          it->counted_in == job_generation_) {
        --compiles_beside_job_;
        spdlog::info("compile task {}: from the cache, not counted beside the job", task.task_id());
      }
      compiles_running_.erase(it);
    }
    v1::WorkerMessage m;
    m.mutable_compile_result()->set_task_id(task.task_id());
    *m.mutable_compile_result()->mutable_result() = std::move(result);
    // No stream: the coordinator answered the task as lost when the stream ended.
    if (!Send(m)) spdlog::warn("compile task {}: no stream to answer on", task.task_id());
    --compiles_busy_;
  }
}

void WorkerDaemon::Run() {
  absl::Duration backoff = options_.min_backoff;
  std::mt19937 rng(std::random_device{}());
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (drain_requested_ && IdleLocked()) break;
    }
    // Draining without a coordinator to tell: nothing ahead is kept.
    if (drain_requested_) StopAheadCompiles();
    absl::Time start = absl::Now();
    Session();
    {
      absl::MutexLock lock(&mu_);
      if (drain_requested_ && IdleLocked()) break;
    }
    if (absl::Now() - start > absl::Seconds(5)) backoff = options_.min_backoff;  // it had been up
    absl::Duration wait = backoff * std::uniform_real_distribution<double>(0.5, 1.0)(rng);
    spdlog::info("reconnecting to {} in {}", options_.coordinator, absl::FormatDuration(wait));
    absl::SleepFor(wait);
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
  if (job_thread_.joinable()) job_thread_.join();
  spdlog::info("worker {} drained; leaving", options_.worker_id);
}

bool WorkerDaemon::Send(const v1::WorkerMessage& m) {
  absl::MutexLock lock(&mu_);
  return stream_ != nullptr && stream_->Write(m);
}

void WorkerDaemon::FlushLocked() {
  while (stream_ != nullptr && !outbox_.empty()) {
    v1::WorkerMessage m;
    *m.mutable_event() = outbox_.front();
    if (!stream_->Write(m)) return;  // kept for the next stream
    if (outbox_.front().event().stage() == v1::DONE && outbox_.front().job_id() == job_id_ &&
        !job_running_) {
      job_id_.clear();
    }
    outbox_.pop_front();
  }
}

void WorkerDaemon::Post(v1::JobEvent event) {
  absl::MutexLock lock(&mu_);
  outbox_.push_back(std::move(event));
  FlushLocked();
}

void WorkerDaemon::Session() {
  grpc::ClientContext ctx;
  if (!options_.token.empty()) ctx.AddMetadata("authorization", "Bearer " + options_.token);
  std::unique_ptr<Stream> stream = stub_->Connect(&ctx);
  v1::WorkerMessage reg_msg;
  v1::Register* reg = reg_msg.mutable_register_();
  reg->set_worker_id(options_.worker_id);
  *reg->mutable_capabilities() = options_.capabilities;
  {
    absl::MutexLock lock(&mu_);
    reg->set_healthy(healthy_);
    reg->set_unhealthy_reason(unhealthy_reason_);
    reg->set_finishing(finishing_);
    if (!job_id_.empty()) reg->add_running_job_ids(job_id_);
  }
  if (!stream->Write(reg_msg)) {
    spdlog::warn("cannot reach the coordinator at {}: {}", options_.coordinator,
                 stream->Finish().error_message());
    return;
  }
  v1::CoordinatorMessage in;
  if (!stream->Read(&in) || !in.has_register_ack()) {
    grpc::Status st = stream->Finish();
    spdlog::warn("registration failed: {}", st.error_message());
    return;
  }
  const v1::RegisterAck ack = in.register_ack();
  spdlog::info("registered with {} as {} (heartbeat every {} ms)", options_.coordinator,
               options_.worker_id, ack.heartbeat_interval_ms());
  {
    absl::MutexLock lock(&mu_);
    stream_ = stream.get();
    context_ = &ctx;
    drain_sent_ = false;
    for (const std::string& id : ack.cancel_job_ids()) {
      if (id == job_id_ && cancel_) cancel_->Cancel();
    }
    // What changed since the Register was written (a verdict that came meanwhile: finishing)
    // goes before the events it queued.
    SendHeartbeatLocked();
    FlushLocked();
  }
  if (options_.observer) options_.observer->Connected(true);
  std::atomic<bool> stop{false};
  std::thread heartbeat([&] {
    HeartbeatLoop(absl::Milliseconds(std::max<int64_t>(ack.heartbeat_interval_ms(), 50)), &stop);
  });

  while (stream->Read(&in)) {
    switch (in.kind_case()) {
      case v1::CoordinatorMessage::kLease:
        StartJob(in.lease());
        break;
      case v1::CoordinatorMessage::kCompile:
        QueueCompile(in.compile());
        break;
      case v1::CoordinatorMessage::kCancel: {
        absl::MutexLock lock(&mu_);
        if (in.cancel().job_id() == job_id_ && cancel_) {
          spdlog::info("cancelling job {}: {}", job_id_, in.cancel().reason());
          cancel_->Cancel();
        }
        break;
      }
      case v1::CoordinatorMessage::kDrain:
        spdlog::info("the coordinator asks to drain: {}", in.drain().reason());
        drain_requested_ = true;
        break;
      default:
        break;
    }
  }
  stop = true;
  heartbeat.join();
  {
    absl::MutexLock lock(&mu_);
    stream_ = nullptr;
    context_ = nullptr;
  }
  if (options_.observer) options_.observer->Connected(false);
  grpc::Status st = stream->Finish();
  if (!st.ok() && !(drain_requested_ && st.error_code() == grpc::StatusCode::CANCELLED)) {
    spdlog::warn("stream to the coordinator ended: {} ({})", st.error_message(),
                 static_cast<int>(st.error_code()));
  }
}

void WorkerDaemon::HeartbeatLoop(absl::Duration interval, std::atomic<bool>* stop) {
  absl::Time next = absl::Now() + interval;
  bool ahead_stopped = false;
  while (!*stop) {
    absl::SleepFor(absl::Milliseconds(20));
    if (drain_requested_ && !ahead_stopped) {
      bool told;
      {
        absl::MutexLock lock(&mu_);
        told = drain_sent_;
      }
      // Once the coordinator knows (it sends no more), what it sent is stopped.
      if (told) {
        StopAheadCompiles();
        ahead_stopped = true;
      }
    }
    absl::MutexLock lock(&mu_);
    if (stream_ == nullptr) return;
    if (drain_requested_ && !drain_sent_) {
      v1::WorkerMessage m;
      m.mutable_drain()->set_reason("the worker is shutting down");
      drain_sent_ = stream_->Write(m);
    }
    if (drain_requested_ && IdleLocked()) {
      context_->TryCancel();  // drained: end the stream; Run() returns
      return;
    }
    if (absl::Now() < next) continue;
    next = absl::Now() + interval;
    v1::WorkerMessage m;
    m.mutable_heartbeat()->set_healthy(healthy_);
    m.mutable_heartbeat()->set_unhealthy_reason(unhealthy_reason_);
    m.mutable_heartbeat()->set_finishing(finishing_);
    if (!job_id_.empty()) m.mutable_heartbeat()->add_running_job_ids(job_id_);
    if (!stream_->Write(m)) return;
  }
}

void WorkerDaemon::StartJob(const v1::Lease& lease) {
  auto cancel = std::make_shared<CancelToken>();
  {
    absl::MutexLock lock(&mu_);
    if (job_running_) {
      spdlog::error("lease {} while job {} runs; refusing it", lease.job_id(), job_id_);
      return;
    }
    job_running_ = true;
    job_id_ = lease.job_id();
    cancel_ = cancel;
  }
  spdlog::info("job {} (attempt {}): problem {} at W={}", lease.job_id(), lease.attempt(),
               lease.spec().problem_id(), lease.spec().world_size());
  // The last job's verdict may be out while its engine still ends and its health check runs:
  // this job starts once both are over (a coordinator leases none meanwhile: `finishing`). The
  // wait is the new thread's, not the stream reader's.
  std::thread previous = std::move(job_thread_);
  job_thread_ = std::thread([this, lease, cancel, previous = std::move(previous)]() mutable {
    if (previous.joinable()) previous.join();
    LogScope log_scope(lease.job_id());
    auto post = [&](const v1::EvalEvent& e) {
      v1::JobEvent je;
      je.set_job_id(lease.job_id());
      je.set_attempt(lease.attempt());
      *je.mutable_event() = e;
      Post(std::move(je));
    };
    // The DONE goes out as soon as the verdict is there; the slot stays taken (`finishing`, told
    // the coordinator before the DONE) until the engine has ended and the health check passed.
    std::optional<v1::EvalResult> sent;
    absl::Time done_at;
    auto send_done = [&](const v1::EvalResult& result) {
      sent = result;
      done_at = absl::Now();
      PauseCompiles(false);
      v1::EvalEvent done;
      done.set_stage(v1::DONE);
      done.set_message(result.message());
      *done.mutable_result() = result;
      {
        absl::MutexLock lock(&mu_);
        job_running_ = false;
        finishing_ = true;
        cancel_.reset();
        SendHeartbeatLocked();
      }
      post(done);
    };
    {
      absl::MutexLock lock(&mu_);
      if (!healthy_) {
        // Leased by a coordinator that did not wait for the last job's health check, which
        // failed: the lease goes back. The stream ends, and the worker registers again without
        // the job, which the coordinator then queues again for another worker.
        spdlog::error(
            "job {}: not run, this worker failed its health check ({}); handing the "
            "lease back",
            lease.job_id(), unhealthy_reason_);
        job_running_ = false;
        job_id_.clear();
        cancel_.reset();
        if (context_ != nullptr) context_->TryCancel();
        return;
      }
    }
    if (options_.observer) options_.observer->JobStarted();
    const absl::Time started = absl::Now();
    // The verdict as the engine gives it, but an INTERNAL one as Run concludes it (with the
    // engine's exit and its stderr's tail).
    BeginJobCompiles(lease.source());
    v1::EvalResult result = executor_->Run(
        lease, post,
        [&](const v1::EvalResult& verdict) {
          if (verdict.status() == v1::INTERNAL) return;
          spdlog::info("job {}: {} {}", lease.job_id(), v1::Status_Name(verdict.status()),
                       verdict.message());
          send_done(verdict);
        },
        // From the timing on to the verdict, compiles beside the job wait; the engine times once
        // they are stopped (the executor tells it so).
        [&] {
          PauseCompiles(true);
          return CompilesBesideJob();
        },
        cancel.get());
    if (!sent) {
      spdlog::info("job {}: {} {}", lease.job_id(), v1::Status_Name(result.status()),
                   result.message());
      send_done(result);
    } else if (result.status() != sent->status()) {
      // Its rank processes died or hung after their reports (pkb-eval's exit 4), or the engine
      // failed: the verdict stands, the GPU gets its check below.
      const std::string& log = result.failed_rank_log();
      spdlog::error("job {}: after its verdict: {}: {}", lease.job_id(),
                    v1::Status_Name(result.status()),
                    log.substr(log.size() > 400 ? log.size() - 400 : 0));
    }
    const absl::Time engine_ended = absl::Now();
    if (options_.observer) options_.observer->JobFinished(*sent, engine_ended - started);
    // A crash, a fault or a hang may have left the GPU unusable: known-good work on it first.
    const v1::Status status = result.status();
    const bool failed =
        status == v1::RUNTIME_ERROR || status == v1::TIMEOUT || status == v1::INTERNAL;
    const auto& check = failed && options_.failure_health_check ? options_.failure_health_check
                                                                : options_.health_check;
    std::optional<absl::Status> health;
    if (check && options_.healthy) {
      health = check();
      if (options_.observer) options_.observer->HealthChecked(health->ok());
      if (!health->ok()) {
        spdlog::error("health check failed: {}; taking no more jobs",
                      std::string(health->message()));
      }
    }
    // What keeps the slot after the DONE, for whoever tunes a node's turnaround.
    const absl::Time free_at = absl::Now();
    spdlog::info(
        "job {}: slot free {:.3f} s after the DONE (the engine's end {:.3f} s{})", lease.job_id(),
        absl::ToDoubleSeconds(free_at - done_at), absl::ToDoubleSeconds(engine_ended - done_at),
        health ? absl::StrFormat(", %s %.3f s",
                                 failed && options_.failure_health_check ? "the GPU selftest"
                                                                         : "the health check",
                                 absl::ToDoubleSeconds(free_at - engine_ended))
               : "");
    absl::MutexLock lock(&mu_);
    if (health) {
      healthy_ = health->ok();
      unhealthy_reason_ = std::string(health->message());
    }
    finishing_ = false;
    SendHeartbeatLocked();
  });
}

void WorkerDaemon::SendHeartbeatLocked() {
  if (stream_ == nullptr) return;  // the next Register says it
  v1::WorkerMessage m;
  m.mutable_heartbeat()->set_healthy(healthy_);
  m.mutable_heartbeat()->set_unhealthy_reason(unhealthy_reason_);
  m.mutable_heartbeat()->set_finishing(finishing_);
  if (!job_id_.empty()) m.mutable_heartbeat()->add_running_job_ids(job_id_);
  stream_->Write(m);
}

}  // namespace pkb
