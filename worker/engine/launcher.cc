#include "worker/engine/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "common/subprocess.h"

extern char** environ;

namespace pkb {

std::string LaunchResult::Describe(int index) const {
  const RankExit& r = ranks[index];
  if (r.term_signal)
    return absl::StrCat("killed by signal ", r.term_signal, " (", strsignal(r.term_signal), ")");
  return absl::StrCat("exit code ", r.exit_code);
}

std::string TailOfFile(const std::string& path, size_t max_bytes) {
  // Rank logs lie in the submission's scratch folder: a FIFO, a device or a link planted there
  // must not block or mislead the engine, so only a regular file is read.
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return "";
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::StrCat("[pkb: ", path, " is not a regular file; not read]\n");
  }
  const off_t size = st.st_size;
  const off_t from =
      size > static_cast<off_t>(max_bytes) ? size - static_cast<off_t>(max_bytes) : 0;
  std::string s(static_cast<size_t>(size - from), '\0');
  size_t have = 0;
  while (have < s.size()) {
    const ssize_t n = pread(fd, s.data() + have, s.size() - have, from + static_cast<off_t>(have));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    have += static_cast<size_t>(n);
  }
  close(fd);
  s.resize(have);
  return s;
}

namespace {

// Our children that we did not start ourselves: orphans adopted as a subreaper.
std::vector<pid_t> AdoptedChildren(const std::vector<pid_t>& own) {
  std::vector<pid_t> out;
  pid_t self = getpid();
  // A process names itself (comm, which may hold ")\n"): ReadProcStat parses past it, and no
  // error of /proc throws.
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc", ec), end; !ec && it != end;
       it.increment(ec)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(it->path().filename().string(), &pid) || pid <= 0) continue;
    const std::optional<ProcStat> stat = ReadProcStat(pid);
    if (!stat || stat->ppid != self) continue;
    if (std::find(own.begin(), own.end(), pid) == own.end()) out.push_back(pid);
  }
  return out;
}

// The group's lines "<rank> <exit code> <signal>", in the order the ranks ended. A rank with no
// line was still running when the sandbox was killed (timeout) or the group itself died.
void ReadGroupStatus(int fd, const LaunchSpec& spec, const RankExit& group, LaunchResult& result) {
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) text.append(buf, n);
  result.ranks.assign(spec.world, RankExit{});
  std::vector<bool> reported(spec.world, false);
  std::istringstream lines(text);
  int rank, code, sig;
  while (lines >> rank >> code >> sig) {
    if (rank < 0 || rank >= spec.world || reported[rank]) continue;
    reported[rank] = true;
    result.ranks[rank].exit_code = code;
    result.ranks[rank].term_signal = sig;
    if ((code != 0 || sig != 0) && result.first_failed < 0) result.first_failed = rank;
  }
  for (int r = 0; r < spec.world; ++r) {
    result.ranks[r].rank = r;
    result.ranks[r].log_path = absl::StrCat(spec.scratch_dir, "/rank", r, ".log");
    if (!reported[r]) {
      result.ranks[r].term_signal = SIGKILL;
      if (result.first_failed < 0 && !result.timed_out) result.first_failed = r;
    }
  }
  if (result.first_failed < 0 && (group.exit_code != 0 || group.term_signal != 0)) {
    // Every rank ended well but the group did not: its own log says why.
    result.first_failed = 0;
    result.ranks[0].exit_code = group.exit_code;
    result.ranks[0].term_signal = group.term_signal;
    result.ranks[0].log_path = spec.scratch_dir + "/group.log";
  }
}

}  // namespace

// Kills and reaps the orphans we adopted: our children that are neither ranks we started nor the
// children RunSubprocess runs for other threads of this process (pkb-eval's compile).
template <typename Children>
void KillAndReapOrphans(const Children& children) {
  std::vector<pid_t> own;
  for (const auto& c : children) own.push_back(c.pid);
  for (int round = 0; round < 50; ++round) {
    bool found = false;
    WithSubprocessesHeld([&](const std::set<pid_t>& running) {
      std::vector<pid_t> mine = own;
      mine.insert(mine.end(), running.begin(), running.end());
      for (pid_t p : AdoptedChildren(mine)) {
        found = true;
        kill(p, SIGKILL);
        waitpid(p, nullptr, 0);
      }
    });
    if (!found) return;
  }
}

absl::StatusOr<LaunchResult> RankLauncher::Run(const LaunchSpec& spec) {
  struct Child {
    pid_t pid = -1;
    RankExit exit;
    bool done = false;
  };
  // mpirun starts the ranks of the CPU backend and GPU ranks that share GPUs.
  const bool mpirun = spec.backend == "cpu" || spec.backend == "cuda-shared";
  const bool grouped = spec.sandbox != nullptr && !mpirun;
  int processes = mpirun || grouped ? 1 : spec.world;
  std::vector<Child> children(processes);
  int progress_pipe[2] = {-1, -1}, status_pipe[2] = {-1, -1}, answer_pipe[2] = {-1, -1};
  // Whatever way Run leaves, its pipes' ends that are still open close (the normal way closes
  // each where it is done with it, and marks it -1).
  auto close_fd = [](int& fd) {
    if (fd >= 0) close(fd);
    fd = -1;
  };
  absl::Cleanup close_pipes = [&] {
    for (int* p : {progress_pipe, status_pipe, answer_pipe}) {
      close_fd(p[0]);
      close_fd(p[1]);
    }
  };
  if (pipe2(progress_pipe, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  if (grouped && pipe2(status_pipe, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  // Rank 0's stdin (mpirun's, which passes it on to rank 0; the group's, which gives it to rank
  // 0 alone): on_progress's answers. Written without blocking (an answer is a word), and its read
  // end stays open here too, so that an answer to a rank that has ended raises no SIGPIPE.
  if (spec.answer_rank0 && pipe2(answer_pipe, O_CLOEXEC) != 0)
    return absl::InternalError("pipe failed");
  if (answer_pipe[1] >= 0) fcntl(answer_pipe[1], F_SETFL, O_NONBLOCK);

  std::vector<std::string> env_strings;
  if (spec.sandbox) {
    env_strings = SandboxEnvironment("/tmp", spec.env);
  } else {
    for (char** e = environ; *e; ++e) env_strings.push_back(*e);
    for (const auto& kv : spec.env) env_strings.push_back(kv);
  }
  if (grouped) {
    // The group appends to these as the sandbox's uid: create them for it.
    for (int i = 0; i < spec.world; ++i) {
      std::string log = absl::StrCat(spec.scratch_dir, "/rank", i, ".log");
      int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0) return absl::InternalError(absl::StrCat("cannot create ", log));
      if (geteuid() == 0 && fchown(fd, spec.sandbox->uid, spec.sandbox->gid) != 0) {
        close(fd);
        return absl::InternalError(absl::StrCat("cannot chown ", log));
      }
      close(fd);
    }
  }

  // Become the reaper of whatever the ranks leave behind, so nothing outlives the job as a zombie.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  absl::Time start = absl::Now();
  pid_t pgid = 0;
  for (int i = 0; i < processes; ++i) {
    std::vector<std::string> argv;
    if (mpirun) {
      argv = {spec.mpirun,
              "--oversubscribe",
              "--allow-run-as-root",
              "--bind-to",
              "none",
              "--mca",
              "btl",
              "self,vader",
              "-np",
              std::to_string(spec.world),
              spec.rank_binary};
      for (const auto& a : spec.args) argv.push_back(a);
      argv.push_back("--backend=" + spec.backend);
    } else if (grouped) {
      argv = {spec.group_binary,
              "--world",
              std::to_string(spec.world),
              "--log-dir",
              spec.scratch_dir,
              "--status-fd",
              "3",
              "--grace-ms",
              std::to_string(absl::ToInt64Milliseconds(spec.grace_after_failure)),
              "--",
              spec.rank_binary};
      for (const auto& a : spec.args) argv.push_back(a);
    } else {
      argv = {spec.rank_binary};
      for (const auto& a : spec.args) argv.push_back(a);
      argv.push_back(absl::StrCat("--rank=", i));
      argv.push_back(absl::StrCat("--world-size=", spec.world));
      argv.push_back("--backend=cuda");
    }
    if (spec.sandbox) {
      SandboxPolicy policy = *spec.sandbox;
      policy.scratch = spec.scratch_dir;
      PKB_ASSIGN_OR_RETURN(argv, SandboxCommand(policy, argv));
    }
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    std::vector<std::string> env = env_strings;
    env.push_back(absl::StrCat("PKB_RANK=", i));
    std::vector<char*> cenv;
    for (auto& e : env) cenv.push_back(e.data());
    cenv.push_back(nullptr);
    std::string log = absl::StrCat(spec.scratch_dir, "/rank", i, ".log");
    children[i].exit.rank = i;
    children[i].exit.log_path = log;
    // Grouped, the group writes the rank logs; its own messages go to group.log.
    std::string own_log = grouped ? spec.scratch_dir + "/group.log" : log;
    int log_fd = open(own_log.c_str(),
                      O_WRONLY | O_CREAT | O_CLOEXEC | (grouped ? O_APPEND : O_TRUNC), 0644);
    if (log_fd < 0) return absl::InternalError(absl::StrCat("cannot create ", own_log));

    pid_t pid = fork();
    if (pid < 0) {
      // Those started already go: none may run on, unwatched.
      const int error = errno;
      close(log_fd);
      if (pgid > 0) KillProcessGroup(pgid, SIGKILL);
      for (int k = 0; k < i; ++k) waitpid(children[k].pid, nullptr, 0);
      return absl::InternalError(absl::StrCat("fork: ", strerror(error)));
    }
    if (pid == 0) {
      setpgid(0, pgid);  // the first child leads the group; the others join it
      // Nothing of the job outlives its launcher (the thread that forked this process).
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (i == 0 || mpirun) {
        dup2(progress_pipe[1], 1);
      } else {
        dup2(log_fd, 1);
      }
      dup2(log_fd, 2);
      if (grouped) dup2(status_pipe[1], 3);  // dup2 clears close-on-exec
      if (i == 0 && answer_pipe[0] >= 0) {
        dup2(answer_pipe[0], 0);
      } else if (int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC); devnull >= 0) {
        dup2(devnull, 0);
      }
      execvpe(cargv[0], cargv.data(), cenv.data());
      _exit(127);
    }
    if (pgid == 0) pgid = pid;
    setpgid(pid, pgid);
    close(log_fd);
    children[i].pid = pid;
  }
  close_fd(status_pipe[1]);
  close_fd(progress_pipe[1]);

  LaunchResult result;
  std::string buffer;
  constexpr size_t kMaxLine = 64 << 10, kMaxLog = 16 << 20;
  size_t log_bytes = 0;
  std::ofstream rank0_log(children[0].exit.log_path, std::ios::app);
  // Behind a closed gate the run's own limit has not started.
  bool gated = static_cast<bool>(spec.gate);
  if (gated) result.before_gate = absl::Seconds(-1);
  // The run's own limit is read once the gate opened (a job that adopts standby ranks sets it).
  absl::Time deadline = gated ? start + spec.gate_limit : start + spec.timeout;
  absl::Time kill_at = absl::InfiniteFuture();
  int alive = processes;
  bool pipe_open = true;
  while (alive > 0) {
    absl::Time now = absl::Now();
    if (gated) {
      const Gate gate = spec.gate();
      if (gate != Gate::kClosed) {
        gated = false;
        result.before_gate = now - start;
        deadline = now + spec.timeout;
      }
      if (gate == Gate::kCalledOff) {
        result.called_off = true;
        KillProcessGroup(pgid, SIGKILL);
      }
    }
    if (now >= deadline && !result.timed_out) {
      result.timed_out = true;
      KillProcessGroup(pgid, SIGKILL);
    }
    if (now >= kill_at) KillProcessGroup(pgid, SIGKILL);
    if (pipe_open) {
      pollfd pfd{progress_pipe[0], POLLIN, 0};
      // Behind a closed gate, quicker: a called-off run ends as soon as it is called off; and
      // with `settled`, so that an outcome is taken as soon as it is there, and the ranks' end
      // after it (the next job waits for it) seen as soon as it comes.
      const bool quick = gated || spec.settled;
      if (poll(&pfd, 1, quick ? 5 : 50) > 0) {
        char buf[4096];
        ssize_t n = read(progress_pipe[0], buf, sizeof buf);
        if (n <= 0) {
          pipe_open = false;
        } else {
          buffer.append(buf, n);
          // Rank 0's stdout is the submission's too: a line without end must not grow the
          // buffer without bound, nor the log fill the worker's disk.
          if (buffer.find('\n') == std::string::npos && buffer.size() > kMaxLine) buffer += '\n';
          size_t pos;
          while ((pos = buffer.find('\n')) != std::string::npos) {
            std::string line = buffer.substr(0, pos);
            buffer.erase(0, pos + 1);
            if (absl::StartsWith(line, "PKB-PROGRESS ")) {
              const std::string answer = spec.on_progress ? spec.on_progress(line.substr(13)) : "";
              if (!answer.empty() && answer_pipe[1] >= 0) {
                (void)!write(answer_pipe[1], answer.data(), answer.size());
              }
            } else if (rank0_log && log_bytes < kMaxLog) {
              // Everything else rank 0 prints (device printf of a trapping kernel, say) is kept.
              log_bytes += line.size() + 1;
              rank0_log << line << "\n" << std::flush;
              if (log_bytes >= kMaxLog) rank0_log << "[pkb: log cut here]\n" << std::flush;
            }
          }
        }
      }
    } else {
      usleep(gated || spec.settled ? 5000 : 20000);
    }
    for (int i = 0; i < processes; ++i) {
      if (children[i].done) continue;
      int status = 0;
      pid_t r = waitpid(children[i].pid, &status, WNOHANG);
      if (r != children[i].pid) continue;
      children[i].done = true;
      --alive;
      if (WIFSIGNALED(status)) {
        children[i].exit.term_signal = WTERMSIG(status);
      } else {
        children[i].exit.exit_code = WEXITSTATUS(status);
      }
      bool failed = children[i].exit.term_signal != 0 || children[i].exit.exit_code != 0;
      if (failed && result.first_failed < 0) {
        result.first_failed = i;
        kill_at = absl::Now() + spec.grace_after_failure;
      }
    }
    if (spec.settled && !result.settled && !gated && alive > 0 && !result.timed_out &&
        !result.called_off && result.first_failed < 0) {
      LaunchResult so_far = result;
      so_far.elapsed = absl::Now() - start;
      // Grouped, the group writes each rank's log under the same name.
      const int logs = grouped ? spec.world : processes;
      for (int i = 0; i < logs; ++i) {
        so_far.ranks.push_back(
            i < processes ? children[i].exit
                          : RankExit{i, -1, 0, absl::StrCat(spec.scratch_dir, "/rank", i, ".log")});
      }
      result.settled = spec.settled(so_far);
    }
  }
  close_fd(progress_pipe[0]);
  close_fd(answer_pipe[0]);
  close_fd(answer_pipe[1]);
  if (spec.before_cleanup) spec.before_cleanup();
  KillProcessGroup(pgid, SIGKILL);  // anything a rank left behind
  // Ranks that left the group (mpirun starts its ranks in their own sessions) were re-parented
  // to us when their launcher died, since we are a subreaper: kill and reap them too.
  KillAndReapOrphans(children);
  if (grouped) {
    result.first_failed = -1;  // the group's own exit says little; its lines say who failed
    ReadGroupStatus(status_pipe[0], spec, children[0].exit, result);
    close_fd(status_pipe[0]);
  } else {
    for (auto& c : children) result.ranks.push_back(c.exit);
  }
  result.elapsed = absl::Now() - start;
  return result;
}

}  // namespace pkb
