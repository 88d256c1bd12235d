#include "worker/daemon/executor.h"

#include <google/protobuf/util/json_util.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/eval_spec.h"
#include "common/files.h"
#include "common/subprocess.h"

namespace pkb {

void CancelToken::KillGroup(pid_t pgid) { KillProcessGroup(pgid, SIGKILL); }

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

}  // namespace

v1::EvalResult Executor::Compile(const v1::CompileTask& task, CancelToken* cancel) {
  return Verdict(v1::INTERNAL, "this worker's executor does not compile");
}

v1::EvalResult EngineExecutor::Run(const v1::Lease& lease, const EventCallback& on_event,
                                   CancelToken* cancel) {
  return RunEngine(
      lease.spec(), lease.source(), lease.job_key(), {}, "job-", "evaluation",
      /*background=*/false,
      lease.deadline_ms() > 0 ? absl::Milliseconds(lease.deadline_ms()) : absl::Minutes(30),
      on_event, cancel);
}

v1::EvalResult EngineExecutor::Compile(const v1::CompileTask& task, CancelToken* cancel) {
  // The compile's events (COMPILING) have no watcher: the answer is the result alone.
  return RunEngine(
      task.spec(), task.source(), "", {"--compile-only"}, "compile-", "compile",
      /*background=*/true,
      task.deadline_ms() > 0 ? absl::Milliseconds(task.deadline_ms()) : absl::Minutes(2),
      [](const v1::EvalEvent&) {}, cancel);
}

v1::EvalResult EngineExecutor::RunEngine(const v1::EvalSpec& spec_message,
                                         const std::string& source_text, const std::string& job_key,
                                         const std::vector<std::string>& extra, const char* prefix,
                                         const char* what, bool background, absl::Duration timeout,
                                         const EventCallback& on_event, CancelToken* cancel) {
  // The file name tells the engine how to compile the source: .cu with nvcc, .cc with the host
  // compiler (a CPU candidate).
  const std::string& language = spec_message.language();
  const char* file_name = nullptr;
  if (language.empty() || language == "cuda") {
    file_name = "candidate.cu";
  } else if (language == "cpp") {
    file_name = "candidate.cc";
  } else {
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

  SubprocessOptions opts;
  // RunSubprocess does not tell the child's pid, and cancel needs it: a shell prints its own pid
  // (which is the process group, RunSubprocess starts a new session) and execs the engine.
  // TODO: replace with a start callback in SubprocessOptions (common/ is another owner's).
  // setpriv makes the engine die with the daemon (kill -9 included) instead of holding the GPUs.
  const bool pdeathsig = access("/usr/bin/setpriv", X_OK) == 0;
  // A compile runs beside the node's job, whose ranks are timed on the host's clock: it yields
  // the CPU to them.
  const bool nice = background && access("/usr/bin/nice", X_OK) == 0;
  opts.argv = {"/bin/sh",
               "-c",
               absl::StrCat("echo \"", kPidPrefix, "$$\"; exec ",
                            pdeathsig ? "/usr/bin/setpriv --pdeathsig KILL -- " : "",
                            nice ? "/usr/bin/nice -n 10 " : "", "\"$0\" \"$@\""),
               options_.engine,
               "--spec",
               spec,
               source,  // positional, as pkb-eval takes it
               "--events",
               "--scratch",
               *dir};
  if (!job_key.empty()) opts.argv.insert(opts.argv.end(), {"--job-key", job_key});
  opts.argv.insert(opts.argv.end(), extra.begin(), extra.end());
  opts.cwd = *dir;
  opts.timeout = timeout;
  opts.max_output_bytes = 16 << 20;

  std::optional<v1::EvalResult> final_result;
  std::string bad_lines;
  opts.on_stdout_line = [&](const std::string& line) {
    if (absl::StartsWith(line, kPidPrefix)) {
      int pid = 0;
      if (absl::SimpleAtoi(line.substr(sizeof(kPidPrefix) - 1), &pid)) cancel->SetProcessGroup(pid);
      return;
    }
    if (line.empty()) return;
    v1::EvalEvent event;
    google::protobuf::util::JsonParseOptions jopts;
    jopts.ignore_unknown_fields = true;
    if (!google::protobuf::util::JsonStringToMessage(line, &event, jopts).ok()) {
      if (bad_lines.size() < 4096) absl::StrAppend(&bad_lines, line.substr(0, 512), "\n");
      return;
    }
    if (event.stage() == v1::DONE) {
      final_result = event.result();
    } else {
      on_event(event);
    }
  };
  absl::StatusOr<SubprocessResult> r = RunSubprocess(opts);
  cancel->SetProcessGroup(0);
  RemoveTree(*dir).IgnoreError();
  if (!r.ok())
    return Verdict(v1::INTERNAL, absl::StrCat("cannot start the engine: ", r.status().message()));
  if (cancel->cancelled())
    return Verdict(v1::CANCELLED,
                   absl::StrCat("cancelled; the ", what, " was killed on the worker"));
  if (r->timed_out) {
    return Verdict(v1::TIMEOUT,
                   absl::StrCat("the ", what, " ran past its limit of ",
                                absl::FormatDuration(opts.timeout), " and was killed"));
  }
  if (final_result && r->exit_code == 0 && !r->signaled) return *final_result;
  if (final_result && !r->signaled) {
    // A verdict with a failing exit code is the engine's own failure: INTERNAL, never cached.
    v1::EvalResult internal = *final_result;
    internal.set_status(v1::INTERNAL);
    internal.set_message(
        absl::StrCat(final_result->message(), " (the engine exited with ", r->Describe(), ")"));
    if (internal.failed_rank_log().empty()) internal.set_failed_rank_log(Tail(r->err, 8192));
    return internal;
  }
  v1::EvalResult internal = Verdict(
      v1::INTERNAL,
      absl::StrCat("the engine failed (", r->Describe(), final_result ? "" : ", no verdict", ")"));
  internal.set_failed_rank_log(Tail(r->err + bad_lines, 8192));
  return internal;
}

}  // namespace pkb
