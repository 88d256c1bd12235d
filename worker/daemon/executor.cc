#include "worker/daemon/executor.h"

#include <fcntl.h>
#include <google/protobuf/util/json_util.h>
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/eval_spec.h"
#include "common/files.h"
#include "common/quiet_word.h"
#include "common/subprocess.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace pkb {

void CancelToken::KillGroup(pid_t pgid) { KillProcessGroup(pgid, SIGKILL); }

std::vector<pid_t> CancelToken::SignalTree(pid_t root, int sig) {
  // A stopped parent starts no child, so a few passes find what started meanwhile.
  std::set<pid_t> signalled;
  for (int pass = 0; pass < 3; ++pass) {
    std::map<pid_t, std::vector<pid_t>> children;
    std::error_code ec;
    // increment(ec): a range-for's ++ throws on a failed readdir.
    for (std::filesystem::directory_iterator it("/proc", ec), end; !ec && it != end;
         it.increment(ec)) {
      pid_t pid = 0;
      if (!absl::SimpleAtoi(it->path().filename().string(), &pid)) continue;
      // Not a stream: a process that ends meanwhile would throw from it (ReadProcStat).
      const std::optional<ProcStat> stat = ReadProcStat(pid);
      if (stat) children[stat->ppid].push_back(pid);
    }
    std::vector<pid_t> order{root};
    for (size_t i = 0; i < order.size(); ++i) {
      for (pid_t c : children[order[i]]) order.push_back(c);
    }
    bool any = false;
    for (pid_t pid : order) {
      if (!signalled.insert(pid).second) continue;
      kill(pid, sig);
      any = true;
    }
    if (!any) break;
  }
  return {signalled.begin(), signalled.end()};
}

namespace {

constexpr char kPidPrefix[] = "PKB_WORKER_CHILD_PID ";

v1::EvalResult Verdict(v1::Status status, std::string message) {
  v1::EvalResult r;
  r.set_status(status);
  r.set_message(std::move(message));
  return r;
}

std::string Tail(const std::string& s, size_t n) {
  return s.size() <= n ? s : s.substr(s.size() - n);
}

// The file the source is written to: its name tells the engine how to compile it (.cu with nvcc,
// .cc with the host compiler: a CPU candidate). Empty for a language this worker does not know.
std::string SourceFileName(const std::string& language) {
  if (language.empty() || language == "cuda") return "candidate.cu";
  if (language == "cpp") return "candidate.cc";
  return "";
}

// The pid line of EngineCommand's shell, or 0.
pid_t PidOfLine(const std::string& line) {
  int pid = 0;
  if (!absl::StartsWith(line, kPidPrefix) ||
      !absl::SimpleAtoi(line.substr(sizeof(kPidPrefix) - 1), &pid)) {
    return 0;
  }
  return pid;
}

// The FIFO in a job's folder where the worker says it may be timed (pkb-eval --quiet-from).
constexpr char kQuietFifo[] = "quiet.fifo";

// What the engine writes on stdout for one job: its events (JSON lines), DONE last with the
// result, which goes to `on_verdict` at once (the engine exits after its ranks have ended). At
// the first BENCHMARKING event, where the engine listens on `quiet_fifo`, `on_quiet` runs and its
// count is told the engine there (0 without one).
class EngineOutput {
 public:
  EngineOutput(const Executor::EventCallback& on_event, const Executor::VerdictCallback& on_verdict,
               CancelToken* cancel, const Executor::QuietCallback& on_quiet = {},
               std::string quiet_fifo = "")
      : on_event_(on_event),
        on_verdict_(on_verdict),
        on_quiet_(on_quiet),
        quiet_fifo_(std::move(quiet_fifo)),
        cancel_(cancel) {}

  void Line(const std::string& line) {
    if (pid_t pid = PidOfLine(line); pid > 0) {
      cancel_->SetProcessGroup(pid);
      return;
    }
    if (line.empty()) return;
    v1::EvalEvent event;
    google::protobuf::util::JsonParseOptions jopts;
    jopts.ignore_unknown_fields = true;
    if (!google::protobuf::util::JsonStringToMessage(line, &event, jopts).ok()) {
      if (bad_lines_.size() < 4096) absl::StrAppend(&bad_lines_, line.substr(0, 512), "\n");
      return;
    }
    if (event.stage() == v1::DONE) {
      if (final_result_) return;  // the engine gives one verdict; a second line is not one
      final_result_ = event.result();
      if (on_verdict_ && !cancel_->cancelled()) on_verdict_(*final_result_);
    } else {
      // The judges wait for this word: it goes before the event (which the caller may take a
      // while to pass on).
      if (event.stage() == v1::BENCHMARKING && !quiet_fifo_.empty() && !quiet_told_) {
        quiet_told_ = true;
        // No callback: nothing else of the caller runs (an engine started ahead listens anyway).
        const int beside = on_quiet_ ? on_quiet_() : 0;
        // Not told, the engine times after its wait (engine.h kQuietWait) and says so.
        if (absl::Status s = TellQuiet(quiet_fifo_, beside); !s.ok()) {
          spdlog::warn("the engine was not told that the job may be timed: {}",
                       std::string(s.message()));
        }
      }
      on_event_(event);
    }
  }

  bool has_verdict() const { return final_result_.has_value(); }

  // The verdict, from the engine's result and how its process ended. `what` names the work.
  v1::EvalResult Conclude(const absl::StatusOr<SubprocessResult>& r, bool timed_out,
                          absl::Duration timeout, const char* what) const {
    if (!r.ok())
      return Verdict(v1::INTERNAL, absl::StrCat("cannot start the engine: ", r.status().message()));
    if (cancel_->cancelled())
      return Verdict(v1::CANCELLED,
                     absl::StrCat("cancelled; the ", what, " was killed on the worker"));
    if (timed_out || r->timed_out) {
      return Verdict(v1::TIMEOUT, absl::StrCat("the ", what, " ran past its limit of ",
                                               absl::FormatDuration(timeout), " and was killed"));
    }
    if (final_result_ && r->exit_code == 0 && !r->signaled) return *final_result_;
    if (final_result_ && !r->signaled) {
      // A verdict with a failing exit code is the engine's own failure: INTERNAL, never cached.
      v1::EvalResult internal = *final_result_;
      internal.set_status(v1::INTERNAL);
      internal.set_message(
          absl::StrCat(final_result_->message(), " (the engine exited with ", r->Describe(), ")"));
      if (internal.failed_rank_log().empty()) internal.set_failed_rank_log(Tail(r->err, 8192));
      return internal;
    }
    v1::EvalResult internal =
        Verdict(v1::INTERNAL, absl::StrCat("the engine failed (", r->Describe(),
                                           final_result_ ? "" : ", no verdict", ")"));
    internal.set_failed_rank_log(Tail(r->err + bad_lines_, 8192));
    return internal;
  }

 private:
  const Executor::EventCallback& on_event_;
  const Executor::VerdictCallback& on_verdict_;
  const Executor::QuietCallback on_quiet_;
  const std::string quiet_fifo_;
  bool quiet_told_ = false;
  CancelToken* cancel_;
  std::optional<v1::EvalResult> final_result_;
  std::string bad_lines_;
};

// How long a standby engine waits for its job before it is given up (its ranks give up after
// an hour: engine.h kStandbyLimit).
constexpr absl::Duration kStandbyEngineLimit = absl::Hours(2);

}  // namespace

// The engine's command line up to its own arguments. RunSubprocess does not tell the child's pid,
// and cancel needs it: a shell prints its own pid (which is the process group, RunSubprocess
// starts a new session) and execs the engine. setpriv makes the engine die with the daemon
// (kill -9 included) instead of holding the GPUs. `background` work runs at nice 10: beside the
// node's job, whose ranks are timed on the host's clock, it yields the CPU to them.
// TODO: replace the shell with a start callback in SubprocessOptions (common/ is another owner's).
std::vector<std::string> EngineCommand(const std::string& engine, bool background,
                                       const std::vector<int>& background_cpus) {
  const bool pdeathsig = access("/usr/bin/setpriv", X_OK) == 0;
  const bool nice = background && access("/usr/bin/nice", X_OK) == 0;
  const bool pin = background && !background_cpus.empty() && access("/usr/bin/taskset", X_OK) == 0;
  // The engine dies with this worker (PDEATHSIG), but the signal is armed only once setpriv
  // runs: a worker killed before that (a standby engine starts the moment a job ends) would leave
  // it orphaned, waiting for a job. So once armed, its parent must still be this worker.
  const std::string armed =
      pdeathsig ? absl::StrCat("/usr/bin/setpriv --pdeathsig KILL -- /bin/sh -c '[ \"$PPID\" = ",
                               getpid(), " ] || exit 1; exec \"$0\" \"$@\"' ")
                : "";
  return {
      "/bin/sh", "-c",
      absl::StrCat(
          "echo \"", kPidPrefix, "$$\"; exec ", armed, nice ? "/usr/bin/nice -n 10 " : "",
          pin ? absl::StrCat("/usr/bin/taskset -c ", absl::StrJoin(background_cpus, ","), " ") : "",
          "\"$0\" \"$@\""),
      engine};
}

v1::EvalResult Executor::Compile(const v1::CompileTask& task, CancelToken* cancel) {
  return Verdict(v1::INTERNAL, "this worker's executor does not compile");
}

// A pkb-eval started ahead of the next job (pkb-eval --standby), with its rank processes for a
// job of the last job's W and backend; it reads the job's arguments from a FIFO in its folder.
struct EngineExecutor::Standby {
  std::string dir;     // the job's folder-to-be, the engine's --scratch
  std::string fifo;    // where the engine reads the job's arguments
  std::thread thread;  // runs the engine to its end
  absl::Mutex mu;
  pid_t pgid ABSL_GUARDED_BY(mu) = 0;
  EngineOutput* job ABSL_GUARDED_BY(mu) = nullptr;  // the job's output, once one took it
  bool verdict ABSL_GUARDED_BY(mu) = false;         // the job's DONE came
  bool done ABSL_GUARDED_BY(mu) = false;
  absl::StatusOr<SubprocessResult> result ABSL_GUARDED_BY(mu) = absl::UnknownError("running");

  // Waits until the engine's process group is known (its shell's first line) or it ended: true
  // when it runs and can be killed. Within 10 s: a shell that says nothing for that long is
  // stuck, and its job goes elsewhere.
  bool AwaitGroup() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    mu.AwaitWithTimeout(
        absl::Condition(
            +[](Standby* s) ABSL_NO_THREAD_SAFETY_ANALYSIS { return s->pgid > 0 || s->done; },
            this),
        absl::Seconds(10));
    return pgid > 0 && !done;
  }

  // Kills the engine (and so its ranks), waits for its end and removes its folder.
  ~Standby() {
    {
      absl::MutexLock lock(&mu);
      if (AwaitGroup()) KillProcessGroup(pgid, SIGKILL);
    }
    if (thread.joinable()) thread.join();
    RemoveTree(dir).IgnoreError();
  }
};

EngineExecutor::EngineExecutor(EngineExecutorOptions options) : options_(std::move(options)) {}

EngineExecutor::~EngineExecutor() {
  absl::MutexLock lock(&standby_mu_);
  standby_.reset();
}

bool EngineExecutor::standby_waiting() {
  absl::MutexLock lock(&standby_mu_);
  if (!standby_) return false;
  absl::MutexLock sb(&standby_->mu);
  return !standby_->done;
}

void EngineExecutor::StartStandby(const v1::EvalSpec& last) {
  absl::MutexLock lock(&standby_mu_);
  if (standby_) return;
  // The shape of the job to come: the last one's W and launch backend (engine.h StartStandby).
  const int world = last.world_size() > 0 ? last.world_size() : 1;
  const std::string backend =
      last.language() == "cpp" ? "cpu" : (last.functional() ? "cuda-shared" : "cuda");
  absl::StatusOr<std::string> dir = MakeTempDir(options_.scratch, "job-");
  if (!dir.ok()) return;  // the next job runs as any other
  std::error_code perm_ec;
  std::filesystem::permissions(*dir, std::filesystem::perms(0711), perm_ec);
  auto sb = std::make_unique<Standby>();
  sb->dir = *dir;
  sb->fifo = *dir + "/job.fifo";
  if (mkfifo(sb->fifo.c_str(), 0600) != 0) return;  // ~Standby removes the folder
  if (mkfifo((sb->dir + "/" + kQuietFifo).c_str(), 0600) != 0) return;
  SubprocessOptions opts;
  opts.argv = EngineCommand(options_.engine, /*background=*/false);
  opts.argv.insert(opts.argv.end(),
                   {"--standby", absl::StrCat(world, ":", backend), "--job-from", sb->fifo,
                    "--events", "--scratch", sb->dir, "--quiet-from", sb->dir + "/" + kQuietFifo});
  if (!options_.gpus.empty()) opts.argv.push_back("--gpus=" + options_.gpus);
  opts.cwd = sb->dir;
  opts.timeout = kStandbyEngineLimit;
  opts.max_output_bytes = 16 << 20;
  Standby* self = sb.get();
  opts.on_stdout_line = [self](const std::string& line) {
    absl::MutexLock lock(&self->mu);
    if (pid_t pid = PidOfLine(line); pid > 0) {
      self->pgid = pid;
    } else if (self->job) {
      self->job->Line(line);
      self->verdict = self->job->has_verdict();
    }
  };
  sb->thread = std::thread([self, opts = std::move(opts)] {
    absl::StatusOr<SubprocessResult> r = RunSubprocess(opts);
    absl::MutexLock lock(&self->mu);
    self->result = std::move(r);
    self->done = true;
  });
  standby_ = std::move(sb);
}

std::vector<std::string> EngineExecutor::SettleArgs(const v1::EvalSpec& spec) const {
  // CPU test candidates ("cpp") time nothing a speedup is ranked on.
  if (spec.language() == "cpp") return {};
  std::vector<std::string> args;
  if (options_.settle_baseline > 0) {
    args.push_back(absl::StrCat("--settle-baseline=", options_.settle_baseline));
  }
  if (options_.baseline_max_age_hours > 0) {
    args.push_back(absl::StrCat("--baseline-max-age-hours=", options_.baseline_max_age_hours));
  }
  return args;
}

std::optional<v1::EvalResult> EngineExecutor::RunOnStandby(
    Standby& sb, const v1::Lease& lease, const EventCallback& on_event,
    const VerdictCallback& on_verdict, const QuietCallback& on_quiet,
    const std::function<void()>& next, CancelToken* cancel, absl::Duration timeout) {
  const std::string file_name = SourceFileName(lease.spec().language());
  if (file_name.empty()) return std::nullopt;  // RunEngine says why
  const std::string source = absl::StrCat(sb.dir, "/", file_name);
  const std::string spec = absl::StrCat(sb.dir, "/spec.txtpb");
  if (!WriteFileAtomic(source, lease.source()).ok() || !WriteSpecFile(spec, lease.spec()).ok()) {
    return std::nullopt;
  }
  std::vector<std::string> args = {"--spec", spec, source};
  if (!lease.job_key().empty()) args.insert(args.end(), {"--job-key", lease.job_key()});
  for (std::string& a : SettleArgs(lease.spec())) args.push_back(std::move(a));
  nlohmann::json line = args;
  const std::string text = line.dump() + "\n";
  EngineOutput out(on_event, on_verdict, cancel, on_quiet, sb.dir + "/" + kQuietFifo);
  pid_t pgid = 0;
  {
    absl::MutexLock lock(&sb.mu);
    if (!sb.AwaitGroup()) return std::nullopt;
    pgid = sb.pgid;
  }
  // The engine opens the FIFO once its ranks are on their way: a moment after its start.
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  int fd = -1;
  for (;;) {
    fd = open(sb.fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) break;
    const int error = errno;
    absl::MutexLock lock(&sb.mu);
    if (error != ENXIO || sb.done || absl::Now() > give_up) return std::nullopt;
    sb.mu.AwaitWithTimeout(absl::Condition(&sb.done), absl::Milliseconds(5));
  }
  {
    absl::MutexLock lock(&sb.mu);
    sb.job = &out;
  }
  // One line of less than PIPE_BUF bytes: written whole, or not at all.
  const bool sent = text.size() < PIPE_BUF &&
                    write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  if (!sent) {
    absl::MutexLock lock(&sb.mu);
    sb.job = nullptr;  // `out` goes with this frame; the engine is killed with `sb`
    return std::nullopt;
  }
  cancel->SetProcessGroup(pgid);
  bool timed_out = false;
  const absl::Time deadline = absl::Now() + timeout;
  bool next_started = false;
  for (;;) {
    {
      absl::MutexLock lock(&sb.mu);
      // The engine's end, or its verdict before it (then `next` runs, outside the lock).
      const bool ended = next_started ? sb.mu.AwaitWithDeadline(absl::Condition(&sb.done), deadline)
                                      : sb.mu.AwaitWithDeadline(
                                            absl::Condition(
                                                +[](Standby* s) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                                                  return s->done || s->verdict;
                                                },
                                                &sb),
                                            deadline);
      if (!ended) {
        timed_out = true;
        KillProcessGroup(pgid, SIGKILL);
        sb.mu.Await(absl::Condition(&sb.done));
      }
      if (sb.done) break;
    }
    next_started = true;
    next();
  }
  sb.thread.join();
  cancel->SetProcessGroup(0);
  absl::MutexLock lock(&sb.mu);
  sb.job = nullptr;
  return out.Conclude(sb.result, timed_out, timeout, "evaluation");
}

v1::EvalResult EngineExecutor::Run(const v1::Lease& lease, const EventCallback& on_event,
                                   const VerdictCallback& on_verdict, const QuietCallback& on_quiet,
                                   CancelToken* cancel) {
  const absl::Duration timeout =
      lease.deadline_ms() > 0 ? absl::Milliseconds(lease.deadline_ms()) : absl::Minutes(30);
  std::unique_ptr<Standby> sb;
  {
    absl::MutexLock lock(&standby_mu_);
    sb = std::move(standby_);
  }
  // The next job's engine starts as soon as this one's verdict is out: its own start (libtorch)
  // overlaps this engine's end (its ranks' teardown), and its ranks take the node's GPU lock for
  // their early set-up once this engine has let it go.
  const std::function<void()> next = [&] {
    if (options_.standby) StartStandby(lease.spec());
  };
  const VerdictCallback verdict_then_standby = [&](const v1::EvalResult& v) {
    if (on_verdict) on_verdict(v);
    next();
  };
  std::optional<v1::EvalResult> r;
  if (sb) r = RunOnStandby(*sb, lease, on_event, on_verdict, on_quiet, next, cancel, timeout);
  sb.reset();  // an engine that did not take the job is killed
  if (!r) {
    r = RunEngine(lease.spec(), lease.source(), lease.job_key(), SettleArgs(lease.spec()), "job-",
                  "evaluation", /*background=*/false, timeout, on_event, verdict_then_standby,
                  on_quiet, cancel);
  }
  if (options_.standby) StartStandby(lease.spec());  // where no verdict came (it started none)
  return *r;
}

v1::EvalResult EngineExecutor::Compile(const v1::CompileTask& task, CancelToken* cancel) {
  // The compile's events (COMPILING) have no watcher: the answer is the result alone.
  return RunEngine(
      task.spec(), task.source(), "", {"--compile-only"}, "compile-", "compile",
      /*background=*/true,
      task.deadline_ms() > 0 ? absl::Milliseconds(task.deadline_ms()) : absl::Minutes(2),
      [](const v1::EvalEvent&) {}, VerdictCallback(), QuietCallback(), cancel);
}

v1::EvalResult EngineExecutor::RunEngine(const v1::EvalSpec& spec_message,
                                         const std::string& source_text, const std::string& job_key,
                                         const std::vector<std::string>& extra, const char* prefix,
                                         const char* what, bool background, absl::Duration timeout,
                                         const EventCallback& on_event,
                                         const VerdictCallback& on_verdict,
                                         const QuietCallback& on_quiet, CancelToken* cancel) {
  const std::string& language = spec_message.language();
  const std::string file_name = SourceFileName(language);
  if (file_name.empty()) {
    return Verdict(v1::INTERNAL, absl::StrCat("this worker does not know the language '", language,
                                              "' (\"cuda\" or \"cpp\")"));
  }
  absl::StatusOr<std::string> dir = MakeTempDir(options_.scratch, prefix);
  if (!dir.ok())
    return Verdict(v1::INTERNAL, absl::StrCat("worker scratch: ", dir.status().message()));
  // Search-only for others: the engine's sandbox runs the submission as another uid, which must
  // pass through this folder to the job folder the engine makes inside it (docs/security.md).
  std::error_code perm_ec;
  std::filesystem::permissions(*dir, std::filesystem::perms(0711), perm_ec);
  const std::string source = absl::StrCat(*dir, "/", file_name);
  // The spec goes to the engine unchanged, as a file (text: readable in a kept scratch folder).
  const std::string spec = absl::StrCat(*dir, "/spec.txtpb");
  absl::Status written = WriteFileAtomic(source, source_text);
  if (written.ok()) written = WriteSpecFile(spec, spec_message);
  if (!written.ok()) {
    RemoveTree(*dir).IgnoreError();
    return Verdict(v1::INTERNAL, absl::StrCat("worker scratch: ", written.message()));
  }

  const std::string quiet_fifo = on_quiet ? absl::StrCat(*dir, "/", kQuietFifo) : "";
  if (!quiet_fifo.empty() && mkfifo(quiet_fifo.c_str(), 0600) != 0) {
    const int error = errno;
    RemoveTree(*dir).IgnoreError();
    return Verdict(v1::INTERNAL,
                   absl::StrCat("worker scratch: cannot make ", quiet_fifo, ": ", strerror(error)));
  }
  SubprocessOptions opts;
  opts.argv = EngineCommand(options_.engine, background, options_.background_cpus);
  opts.argv.insert(opts.argv.end(), {"--spec", spec,
                                     source,  // positional, as pkb-eval takes it
                                     "--events", "--scratch", *dir});
  if (!quiet_fifo.empty()) opts.argv.insert(opts.argv.end(), {"--quiet-from", quiet_fifo});
  if (!job_key.empty()) opts.argv.insert(opts.argv.end(), {"--job-key", job_key});
  if (!options_.gpus.empty()) opts.argv.push_back("--gpus=" + options_.gpus);
  opts.argv.insert(opts.argv.end(), extra.begin(), extra.end());
  opts.cwd = *dir;
  opts.timeout = timeout;
  opts.max_output_bytes = 16 << 20;
  EngineOutput out(on_event, on_verdict, cancel, on_quiet, quiet_fifo);
  opts.on_stdout_line = [&](const std::string& line) { out.Line(line); };
  absl::StatusOr<SubprocessResult> r = RunSubprocess(opts);
  cancel->SetProcessGroup(0);
  RemoveTree(*dir).IgnoreError();
  return out.Conclude(r, /*timed_out=*/false, timeout, what);
}

}  // namespace pkb
