#include "worker/engine/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
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
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return "";
  std::streamoff size = in.tellg();
  std::streamoff from = size > static_cast<std::streamoff>(max_bytes) ? size - max_bytes : 0;
  in.seekg(from);
  std::string s(static_cast<size_t>(size - from), '\0');
  in.read(s.data(), s.size());
  return s;
}

namespace {

// Our children that we did not start ourselves: orphans adopted as a subreaper.
std::vector<pid_t> AdoptedChildren(const std::vector<pid_t>& own) {
  std::vector<pid_t> out;
  pid_t self = getpid();
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !isdigit(name[0])) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    size_t close_paren = line.rfind(')');
    if (close_paren == std::string::npos) continue;
    std::istringstream rest(line.substr(close_paren + 2));
    char state;
    pid_t ppid;
    rest >> state >> ppid;
    pid_t pid = std::stoi(name);
    if (ppid == self && std::find(own.begin(), own.end(), pid) == own.end()) out.push_back(pid);
  }
  return out;
}

}  // namespace

template <typename Children>
void KillAndReapOrphans(const Children& children) {
  std::vector<pid_t> own;
  for (const auto& c : children) own.push_back(c.pid);
  for (int round = 0; round < 50; ++round) {
    std::vector<pid_t> orphans = AdoptedChildren(own);
    if (orphans.empty()) return;
    for (pid_t p : orphans) {
      kill(p, SIGKILL);
      waitpid(p, nullptr, 0);
    }
  }
}

absl::StatusOr<LaunchResult> RankLauncher::Run(const LaunchSpec& spec) {
  struct Child {
    pid_t pid = -1;
    RankExit exit;
    bool done = false;
  };
  int processes = spec.backend == "cpu" ? 1 : spec.world;
  std::vector<Child> children(processes);
  int progress_pipe[2];
  if (pipe2(progress_pipe, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");

  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) env_strings.push_back(*e);
  for (const auto& kv : spec.env) env_strings.push_back(kv);

  // Become the reaper of whatever the ranks leave behind, so nothing outlives the job as a zombie.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  absl::Time start = absl::Now();
  pid_t pgid = 0;
  for (int i = 0; i < processes; ++i) {
    std::vector<std::string> argv;
    if (spec.backend == "cpu") {
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
      argv.push_back("--backend=cpu");
    } else {
      argv = {spec.rank_binary};
      for (const auto& a : spec.args) argv.push_back(a);
      argv.push_back(absl::StrCat("--rank=", i));
      argv.push_back(absl::StrCat("--world-size=", spec.world));
      argv.push_back("--backend=cuda");
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
    int log_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log_fd < 0) return absl::InternalError(absl::StrCat("cannot create ", log));

    pid_t pid = fork();
    if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
    if (pid == 0) {
      setpgid(0, pgid);  // the first child leads the group; the others join it
      if (i == 0 || spec.backend == "cpu") {
        dup2(progress_pipe[1], 1);
      } else {
        dup2(log_fd, 1);
      }
      dup2(log_fd, 2);
      int devnull = open("/dev/null", O_RDONLY);
      if (devnull >= 0) dup2(devnull, 0);
      execvpe(cargv[0], cargv.data(), cenv.data());
      _exit(127);
    }
    if (pgid == 0) pgid = pid;
    setpgid(pid, pgid);
    close(log_fd);
    children[i].pid = pid;
  }
  close(progress_pipe[1]);

  LaunchResult result;
  std::string buffer;
  std::ofstream rank0_log(children[0].exit.log_path, std::ios::app);
  absl::Time deadline = start + spec.timeout;
  absl::Time kill_at = absl::InfiniteFuture();
  int alive = processes;
  bool pipe_open = true;
  while (alive > 0) {
    absl::Time now = absl::Now();
    if (now >= deadline && !result.timed_out) {
      result.timed_out = true;
      KillProcessGroup(pgid, SIGKILL);
    }
    if (now >= kill_at) KillProcessGroup(pgid, SIGKILL);
    if (pipe_open) {
      pollfd pfd{progress_pipe[0], POLLIN, 0};
      if (poll(&pfd, 1, 50) > 0) {
        char buf[4096];
        ssize_t n = read(progress_pipe[0], buf, sizeof buf);
        if (n <= 0) {
          pipe_open = false;
        } else {
          buffer.append(buf, n);
          size_t pos;
          while ((pos = buffer.find('\n')) != std::string::npos) {
            std::string line = buffer.substr(0, pos);
            buffer.erase(0, pos + 1);
            if (absl::StartsWith(line, "PKB-PROGRESS ")) {
              if (spec.on_progress) spec.on_progress(line.substr(13));
            } else if (rank0_log) {
              // Everything else rank 0 prints (device printf of a trapping kernel, say) is kept.
              rank0_log << line << "\n" << std::flush;
            }
          }
        }
      }
    } else {
      usleep(20000);
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
  }
  close(progress_pipe[0]);
  KillProcessGroup(pgid, SIGKILL);  // anything a rank left behind
  // Ranks that left the group (mpirun starts its ranks in their own sessions) were re-parented
  // to us when their launcher died, since we are a subreaper: kill and reap them too.
  KillAndReapOrphans(children);
  for (auto& c : children) result.ranks.push_back(c.exit);
  result.elapsed = absl::Now() - start;
  return result;
}

}  // namespace pkb
