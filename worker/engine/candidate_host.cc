#include "worker/engine/candidate_host.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/eval_spec.h"
#include "common/status_macros.h"
#include "common/subprocess.h"
#include "worker/engine/profiler.h"

namespace pkb {

namespace {

// The state letter of process `pid`, 0 when it cannot be read.
char StateOf(pid_t pid) {
  const std::optional<ProcStat> stat = ReadProcStat(pid);
  return stat ? stat->state : 0;
}

// The live children of any of `parents` but `except`, from /proc (in the sandbox: its own pid
// namespace), in one pass.
std::vector<pid_t> ChildrenOf(std::initializer_list<pid_t> parents, pid_t except = 0) {
  std::vector<pid_t> kids;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return kids;
  while (dirent* e = readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0' || pid == except) continue;
    const std::optional<ProcStat> stat = ReadProcStat(static_cast<pid_t>(pid));
    if (!stat || stat->state == 'Z') continue;
    if (std::find(parents.begin(), parents.end(), stat->ppid) != parents.end())
      kids.push_back(static_cast<pid_t>(pid));
  }
  closedir(proc);
  return kids;
}

// A stop or continue of `pid` reported to us (its parent) and not yet collected; exits are left
// for waitpid.
int PendingStopOrContinue(pid_t pid, int which) {
  siginfo_t info = {};
  if (waitid(P_PID, static_cast<id_t>(pid), &info, which | WNOHANG) != 0) return 0;
  return info.si_pid == pid ? info.si_code : 0;
}

}  // namespace

absl::Status CandidateHost::Spawn() {
  if (pid_ > 0) return absl::OkStatus();
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return absl::InternalError("socketpair failed");
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 3);
  posix_spawn_file_actions_adddup2(&fa, 2, 1);
  // Not the judge's stdin, where the engine's word to time comes (judge.h
  // RankOptions::await_quiet).
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addclosefrom_np(&fa, 4);
  std::string exe = "/proc/self/exe", flag = "--candidate-host";
  char* argv[] = {exe.data(), flag.data(), nullptr};
  int rc = posix_spawn(&pid_, exe.c_str(), &fa, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(sv[1]);
  if (rc != 0) {
    close(sv[0]);
    pid_ = -1;
    return absl::InternalError(absl::StrCat("cannot start the candidate host: ", strerror(rc)));
  }
  ch_ = std::make_unique<HostChannel>(sv[0]);
  return absl::OkStatus();
}

absl::Status CandidateHost::SetUpDevice(const v1::HostInit& device) {
  v1::HostRequest req;
  *req.mutable_device() = device;
  return SendSetUp(req);
}

absl::Status CandidateHost::Start(const v1::HostInit& init) {
  v1::HostRequest req;
  *req.mutable_init() = init;
  return SendSetUp(req);
}

absl::Status CandidateHost::SendSetUp(const v1::HostRequest& req) {
  PKB_RETURN_IF_ERROR(Spawn());
  if (!ch_) return Died();
  if (!ch_->Send(req).ok()) return Died();
  ++pending_;
  return absl::OkStatus();
}

absl::Status CandidateHost::Ready() {
  if (!running()) return absl::AbortedError("the candidate's process has ended");
  while (pending_ > 0) {
    --pending_;
    PKB_RETURN_IF_ERROR(Await(false).status());
  }
  return absl::OkStatus();
}

absl::Status CandidateHost::Load() {
  v1::HostRequest req;
  req.set_load(true);
  PKB_RETURN_IF_ERROR(Request(req).status());
  pause_between_ = true;
  Pause();
  return absl::OkStatus();
}

void CandidateHost::Pause() {
  if (!pause_between_ || paused_ || pid_ <= 0) return;
  // SIGSTOP cannot be caught or ignored: every thread of the process stops. We wait until it has
  // (its stop is reported to us, its parent); a process that is never stopped (one that a
  // tracer of its own keeps going) is the submission's doing.
  if (kill(pid_, SIGSTOP) != 0) return;
  const auto start = std::chrono::steady_clock::now();
  while (PendingStopOrContinue(pid_, WSTOPPED) != CLD_STOPPED) {
    const char state = StateOf(pid_);
    if (state == 'Z' || state == 0) return;  // it ended: Died says how
    const auto waited = std::chrono::steady_clock::now() - start;
    // A thread in an uninterruptible wait (a driver call) delays the stop; anything else that is
    // still running after 2 s was continued by something else, or is kept going by a tracer.
    if (waited > std::chrono::seconds(2) && state != 'D') {
      Tampered("it could not be stopped between them (continued by something else, or traced)");
      return;
    }
    if (waited > std::chrono::seconds(10)) {
      std::fprintf(
          stderr, "pkb-rank: the candidate's process did not stop within 10 s (state %c)\n", state);
      return;
    }
    usleep(50);
  }
  paused_ = true;
  // Nothing honest starts a process; one started now would run on while the host is stopped.
  // Its own, and those re-parented to us (a subreaper) once their parents ended.
  const std::vector<pid_t> started = ChildrenOf({pid_, getpid()}, /*except=*/pid_);
  if (!started.empty()) Tampered(absl::StrCat("it started ", started.size(), " process(es)"));
}

void CandidateHost::Resume() {
  if (!paused_ || pid_ <= 0) return;
  // Stopped by us, it must still be stopped, with no stop or continue since: anything else was
  // a signal from the submission (a helper, a peer rank's host), and its code ran between
  // requests.
  if (PendingStopOrContinue(pid_, WSTOPPED | WCONTINUED) != 0 || StateOf(pid_) != 'T')
    Tampered("it was continued between them by something else");
  kill(pid_, SIGCONT);
  paused_ = false;
  // Our own continue is reported to us too: collect it, so that the next check sees only others'.
  for (int i = 0; i < 2000 && PendingStopOrContinue(pid_, WCONTINUED) != CLD_CONTINUED; ++i)
    usleep(50);
}

void CandidateHost::Tampered(const std::string& what) {
  if (tampered_.empty()) tampered_ = what;
}

absl::StatusOr<int> CandidateHost::Map(const RankDevice::SharedSegment& segment) {
  v1::HostRequest req;
  req.mutable_map()->set_id(next_id_);
  req.mutable_map()->set_bytes(static_cast<int64_t>(segment.bytes));
  req.mutable_map()->set_cuda_ipc_handle(segment.cuda_ipc_handle);
  PKB_RETURN_IF_ERROR(Request(req, segment.fd).status());
  return next_id_++;
}

void CandidateHost::Unmap(int id) {
  if (!running()) return;
  v1::HostRequest req;
  req.set_unmap(id);
  (void)Request(req);
}

absl::Status CandidateHost::Call(const v1::HostCall& call) {
  v1::HostRequest req;
  *req.mutable_call() = call;
  return Request(req).status();
}

absl::Status CandidateHost::Loop(const v1::HostLoop& loop) {
  v1::HostRequest req;
  *req.mutable_loop() = loop;
  // One time per marked iteration (HostLoop.timer_stride).
  timed_ = loop.timed() ? MarkedCalls(loop.order_size(), loop.timer_stride()) : 0;
  return Request(req).status();
}

absl::StatusOr<std::vector<int64_t>> CandidateHost::RunLoop(
    const std::function<absl::Status()>& at_answer) {
  v1::HostRequest req;
  req.set_run_loop(true);
  PKB_ASSIGN_OR_RETURN(v1::HostReply reply, Request(req, -1, at_answer));
  return std::vector<int64_t>(reply.trace_ns().begin(), reply.trace_ns().end());
}

absl::StatusOr<v1::CallProfile> CandidateHost::Profile(const v1::HostCall& call) {
  v1::HostRequest req;
  *req.mutable_profile() = call;
  PKB_ASSIGN_OR_RETURN(v1::HostReply reply, Request(req));
  // The host's own account, so bounded as any of its answers: records, names and the note.
  v1::CallProfile p = std::move(*reply.mutable_profile());
  if (p.records_size() > kMaxProfileRecords) {
    p.set_dropped(p.dropped() + p.records_size() - kMaxProfileRecords);
    p.mutable_records()->DeleteSubrange(kMaxProfileRecords, p.records_size() - kMaxProfileRecords);
  }
  for (auto& r : *p.mutable_records()) {
    if (r.name().size() > 256) r.mutable_name()->resize(256);
    if (r.grid_size() > 3) r.mutable_grid()->Truncate(3);
    if (r.block_size() > 3) r.mutable_block()->Truncate(3);
  }
  if (p.note().size() > 256) p.mutable_note()->resize(256);
  return p;
}

absl::StatusOr<std::vector<double>> CandidateHost::Times() {
  v1::HostRequest req;
  req.set_times(true);
  PKB_ASSIGN_OR_RETURN(v1::HostReply reply, Request(req));
  if (reply.us_size() != timed_) {
    return absl::AbortedError("the candidate's process answered with the wrong number of times");
  }
  return std::vector<double>(reply.us().begin(), reply.us().end());
}

absl::StatusOr<v1::HostReply> CandidateHost::Request(
    const v1::HostRequest& req, int fd, const std::function<absl::Status()>& at_answer) {
  if (!running()) return absl::AbortedError("the candidate's process has ended");
  PKB_RETURN_IF_ERROR(Ready());
  Resume();
  if (!ch_->Send(req, fd).ok()) return Died();
  absl::StatusOr<v1::HostReply> reply =
      Await(req.has_load() || req.has_call() || req.has_profile() ||
            (req.has_loop() && !req.loop().defer()) || req.run_loop());
  answered_at_ = std::chrono::steady_clock::now();
  absl::Status hooked = absl::OkStatus();
  if (reply.ok() && at_answer) hooked = at_answer();
  if (running()) Pause();
  PKB_RETURN_IF_ERROR(hooked);
  return reply;
}

absl::StatusOr<v1::HostReply> CandidateHost::Await(bool barriers) {
  for (;;) {
    v1::HostReply reply;
    absl::Status st = ch_->Receive(&reply);
    if (absl::IsUnavailable(st)) return Died();
    if (!st.ok())
      return absl::AbortedError(absl::StrCat("the candidate's process: ", st.message()));
    if (reply.ask_barrier()) {
      if (!comm_ || !barriers) {
        return absl::AbortedError(
            "the candidate's process asked for a host barrier while none of its code ran");
      }
      PKB_RETURN_IF_ERROR(comm_->Barrier());
      v1::HostRequest done;
      done.set_barrier_done(true);
      if (!ch_->Send(done).ok()) return Died();
      continue;
    }
    if (!reply.ok()) return absl::AbortedError(reply.error().substr(0, 4096));
    return reply;
  }
}

absl::Status CandidateHost::Died() {
  ch_.reset();
  Resume();  // a stopped process would never end
  int status = 0;
  pid_t pid = std::exchange(pid_, -1);
  if (pid <= 0 || waitpid(pid, &status, 0) != pid) {
    return absl::AbortedError("the candidate's process ended");
  }
  if (WIFSIGNALED(status)) {
    return absl::AbortedError(absl::StrCat("the candidate's process died of signal ",
                                           WTERMSIG(status), " (", strsignal(WTERMSIG(status)),
                                           ")"));
  }
  return absl::AbortedError(
      absl::StrCat("the candidate's process exited with status ", WEXITSTATUS(status)));
}

absl::StatusOr<int> CandidateHost::Kill() {
  Stop();
  // What the host started: re-parented to us (a subreaper) once their parents are gone. Each
  // process waited for has had its own children re-parented before it became a zombie, so a
  // round that finds none leaves none behind. The sandbox's process limit bounds the rounds.
  int killed = 0;
  for (int round = 0; round < 1000; ++round) {
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    std::vector<pid_t> kids = ChildrenOf({getpid()});
    if (kids.empty()) return killed;
    for (pid_t k : kids) kill(k, SIGKILL);
    for (pid_t k : kids) {
      if (waitpid(k, nullptr, 0) == k) ++killed;
    }
  }
  return absl::DeadlineExceededError(
      "processes started by the submission kept appearing after 1000 rounds of killing them");
}

void CandidateHost::Stop() {
  ch_.reset();
  if (pid_ > 0) {
    kill(pid_, SIGKILL);  // stopped or not
    waitpid(pid_, nullptr, 0);
  }
  pid_ = -1;
  paused_ = false;
}

}  // namespace pkb
