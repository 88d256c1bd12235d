#include "common/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <mutex>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

extern char** environ;

namespace pkb {

std::string SubprocessResult::Describe() const {
  if (timed_out)
    return absl::StrCat("killed after its time limit (", absl::FormatDuration(elapsed), ")");
  if (signaled)
    return absl::StrCat("killed by signal ", term_signal, " (", strsignal(term_signal), ")");
  return absl::StrCat("exit code ", exit_code);
}

void KillProcessGroup(pid_t pgid, int sig) {
  if (pgid > 0) ::kill(-pgid, sig);
}

namespace {

std::mutex& ChildrenMutex() {
  static std::mutex* mu = new std::mutex;
  return *mu;
}

// The children RunSubprocess is running, on whatever thread (guarded by ChildrenMutex).
std::set<pid_t>& Children() {
  static std::set<pid_t>* children = new std::set<pid_t>;
  return *children;
}

void AppendCapped(std::string* s, const char* data, size_t n, size_t cap) {
  if (s->size() >= cap) return;
  s->append(data, std::min(n, cap - s->size()));
}

}  // namespace

absl::StatusOr<SubprocessResult> RunSubprocess(const SubprocessOptions& options) {
  if (options.argv.empty()) return absl::InvalidArgumentError("RunSubprocess: empty argv");
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  }

  // Build argv and envp before fork: only async-signal-safe calls after it.
  std::vector<char*> argv;
  for (const auto& a : options.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env_strings;
  if (!options.clear_env) {
    for (char** e = environ; *e; ++e) {
      std::string kv(*e);
      std::string key = kv.substr(0, kv.find('='));
      if (!options.env.count(key)) env_strings.push_back(kv);
    }
  }
  for (const auto& [k, v] : options.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);

  absl::Time start = absl::Now();
  // Registered as it is born: a reaper of orphans on another thread must not take it for one.
  std::unique_lock<std::mutex> registry(ChildrenMutex());
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  if (pid == 0) {
    setsid();  // new session and process group: the limit kills everything below
    dup2(out_pipe[1], 1);
    dup2(options.merge_stderr ? out_pipe[1] : err_pipe[1], 2);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    if (!options.cwd.empty() && chdir(options.cwd.c_str()) != 0) _exit(127);
    execvpe(argv[0], argv.data(), envp.data());
    const char msg[] = "exec failed\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(127);
  }
  Children().insert(pid);
  registry.unlock();
  close(out_pipe[1]);
  close(err_pipe[1]);

  SubprocessResult result;
  std::string line_buf;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  absl::Time deadline = options.timeout == absl::InfiniteDuration() ? absl::InfiniteFuture()
                                                                    : start + options.timeout;
  char buf[65536];
  while (open_fds > 0) {
    int wait_ms = -1;
    if (deadline != absl::InfiniteFuture()) {
      absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) {
        result.timed_out = true;
        KillProcessGroup(pid, SIGKILL);
        break;
      }
      wait_ms = static_cast<int>(absl::ToInt64Milliseconds(left)) + 1;
    }
    int rc = poll(fds, 2, wait_ms);
    if (rc < 0 && errno == EINTR) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
        continue;
      }
      if (i == 0) {
        AppendCapped(&result.out, buf, n, options.max_output_bytes);
        if (options.on_stdout_line) {
          line_buf.append(buf, n);
          size_t pos;
          while ((pos = line_buf.find('\n')) != std::string::npos) {
            options.on_stdout_line(line_buf.substr(0, pos));
            line_buf.erase(0, pos + 1);
          }
        }
      } else {
        AppendCapped(&result.err, buf, n, options.max_output_bytes);
      }
    }
  }
  for (auto& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  int status = 0;
  pid_t waited;
  while ((waited = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
  }
  const int wait_error = waited < 0 ? errno : 0;
  {
    std::lock_guard<std::mutex> lock(ChildrenMutex());
    Children().erase(pid);
  }
  // Descendants that outlived the leader (daemonized, or left behind) go with the group.
  KillProcessGroup(pid, SIGKILL);
  if (wait_error != 0) {
    // Its end was taken by another waiter: what it did is unknown, and never a success.
    return absl::InternalError(
        absl::StrCat("lost the exit status of ", options.argv[0], ": ", strerror(wait_error)));
  }
  result.elapsed = absl::Now() - start;
  if (WIFSIGNALED(status)) {
    result.signaled = true;
    result.term_signal = WTERMSIG(status);
  } else if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  }
  if (options.on_stdout_line && !line_buf.empty()) options.on_stdout_line(line_buf);
  return result;
}

void WithSubprocessesHeld(const std::function<void(const std::set<pid_t>&)>& fn) {
  std::lock_guard<std::mutex> lock(ChildrenMutex());
  fn(Children());
}

std::optional<ProcStat> ReadProcStat(pid_t pid) {
  const int fd = open(absl::StrCat("/proc/", pid, "/stat").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[1024];
  const ssize_t got = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (got <= 0) return std::nullopt;
  buf[got] = '\0';
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so read after the last ')'.
  const char* close_paren = strrchr(buf, ')');
  ProcStat out;
  long ppid = 0;
  if (close_paren == nullptr || std::sscanf(close_paren + 1, " %c %ld", &out.state, &ppid) != 2)
    return std::nullopt;
  out.ppid = static_cast<pid_t>(ppid);
  return out;
}

}  // namespace pkb
