// A child process of a service test (a coordinator, a worker), its output appended to a log file;
// SIGKILLed and reaped when destroyed.
#ifndef PKB_TESTS_SERVICE_CHILD_PROCESS_H_
#define PKB_TESTS_SERVICE_CHILD_PROCESS_H_

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace pkb {

class ChildProcess {
 public:
  ChildProcess(std::vector<std::string> argv, const std::string& log,
               const std::map<std::string, std::string>& env = {}) {
    pid_ = fork();
    if (pid_ == 0) {
      int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
      std::vector<char*> args;
      for (auto& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
  }
  ~ChildProcess() { Kill(); }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  bool running() const { return pid_ > 0; }
  void Signal(int sig) {
    if (pid_ > 0) kill(pid_, sig);
  }
  void Terminate() { Signal(SIGTERM); }
  // Sends `sig` and reaps the process.
  void Kill(int sig = SIGKILL) {
    if (pid_ <= 0) return;
    kill(pid_, sig);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  // True once it has exited (and is reaped); false while it still runs after `limit`.
  bool WaitExit(absl::Duration limit) {
    absl::Time end = absl::Now() + limit;
    while (pid_ > 0) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return true;
      }
      if (absl::Now() > end) return false;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return true;
  }

 private:
  pid_t pid_ = -1;
};

}  // namespace pkb

#endif  // PKB_TESTS_SERVICE_CHILD_PROCESS_H_
