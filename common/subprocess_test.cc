#include "common/subprocess.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <thread>

namespace pkb {
namespace {

// Alive and not a zombie (a killed orphan can linger as a zombie until init reaps it).
bool Running(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] != 'Z';
}

TEST_CASE("RunSubprocess captures output and exit code", "[subprocess]") {
  SubprocessOptions o;
  o.argv = {"sh", "-c", "echo out; echo err >&2; exit 3"};
  auto r = RunSubprocess(o);
  REQUIRE(r.ok());
  CHECK(r->exit_code == 3);
  CHECK(r->out == "out\n");
  CHECK(r->err == "err\n");
  CHECK(r->Describe() == "exit code 3");
}

TEST_CASE("RunSubprocess kills the whole process group at the limit", "[subprocess]") {
  SubprocessOptions o;
  // A grandchild that would outlive its parent if only the parent were killed.
  o.argv = {"sh", "-c", "sleep 30 & echo $!; wait"};
  o.timeout = absl::Milliseconds(300);
  auto r = RunSubprocess(o);
  REQUIRE(r.ok());
  CHECK(r->timed_out);
  CHECK(r->elapsed < absl::Seconds(5));
  int grandchild = std::stoi(r->out);
  for (int i = 0; i < 100 && Running(grandchild); ++i) usleep(10000);
  CHECK_FALSE(Running(grandchild));  // killed with its group
}

TEST_CASE("RunSubprocess reports a signal", "[subprocess]") {
  SubprocessOptions o;
  o.argv = {"sh", "-c", "kill -SEGV $$"};
  auto r = RunSubprocess(o);
  REQUIRE(r.ok());
  CHECK(r->signaled);
  CHECK(r->term_signal == SIGSEGV);
}

TEST_CASE("RunSubprocess streams stdout lines", "[subprocess]") {
  SubprocessOptions o;
  o.argv = {"sh", "-c", "printf 'a\\nb\\nc'"};
  std::vector<std::string> lines;
  o.on_stdout_line = [&](const std::string& l) { lines.push_back(l); };
  auto r = RunSubprocess(o);
  REQUIRE(r.ok());
  CHECK(lines == std::vector<std::string>{"a", "b", "c"});
}

TEST_CASE("RunSubprocess's children are known to reapers of orphans, and a lost one is an error",
          "[subprocess]") {
  SubprocessOptions o;
  o.argv = {"sh", "-c", "sleep 0.5; exit 7"};
  absl::StatusOr<SubprocessResult> r;
  std::thread run([&] { r = RunSubprocess(o); });
  // While it runs, it is in the set a reaper skips.
  bool seen = false;
  for (int i = 0; i < 200 && !seen; ++i) {
    WithSubprocessesHeld([&](const std::set<pid_t>& running) { seen = !running.empty(); });
    usleep(2000);
  }
  CHECK(seen);
  run.join();
  REQUIRE(r.ok());
  CHECK(r->exit_code == 7);
  WithSubprocessesHeld([](const std::set<pid_t>& running) { CHECK(running.empty()); });

  // Reaped by another waiter (what a careless reaper of orphans did): an error, never an exit 0.
  // Its background child keeps the output open, so that the other waiter gets there first.
  o.argv = {"sh", "-c", "sleep 1 & exit 0"};
  std::thread other([&] { r = RunSubprocess(o); });
  pid_t child = 0;
  for (int i = 0; i < 200 && child == 0; ++i) {
    WithSubprocessesHeld([&](const std::set<pid_t>& running) {
      if (!running.empty()) child = *running.begin();
    });
    usleep(2000);
  }
  REQUIRE(child > 0);
  int status = 0;
  CHECK(waitpid(child, &status, 0) == child);
  other.join();
  REQUIRE_FALSE(r.ok());
  CHECK(std::string(r.status().message()).find("lost the exit status") != std::string::npos);
}

TEST_CASE("ReadProcStat reads a process's state and parent, and nothing of one that is gone",
          "[subprocess]") {
  const std::optional<ProcStat> self = ReadProcStat(getpid());
  REQUIRE(self.has_value());
  CHECK(self->state == 'R');
  CHECK(self->ppid == getppid());
  // A child that has exited and is not reaped yet is a zombie; reaped, it is gone.
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) _exit(0);
  std::optional<ProcStat> zombie;
  for (int i = 0; i < 500; ++i) {
    zombie = ReadProcStat(child);
    if (zombie && zombie->state == 'Z') break;
    usleep(2000);
  }
  REQUIRE(zombie.has_value());
  CHECK(zombie->state == 'Z');
  CHECK(zombie->ppid == getpid());
  REQUIRE(waitpid(child, nullptr, 0) == child);
  CHECK_FALSE(ReadProcStat(child).has_value());
  CHECK_FALSE(ReadProcStat(0).has_value());
}

TEST_CASE("ReadProcStat reads past a process name made to look like the fields after it",
          "[subprocess]") {
  // Any process names itself (comm, up to 15 bytes): here as a zombie with parent 1, on two lines.
  int ready[2];
  REQUIRE(pipe(ready) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    prctl(PR_SET_NAME, "x) Z 1\n) Z 1 1");
    if (write(ready[1], "n", 1) != 1) _exit(1);
    pause();
    _exit(0);
  }
  close(ready[1]);
  char byte = 0;
  REQUIRE(read(ready[0], &byte, 1) == 1);
  close(ready[0]);
  const std::optional<ProcStat> stat = ReadProcStat(child);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  REQUIRE(stat.has_value());
  CHECK((stat->state == 'S' || stat->state == 'R'));  // on its way to pause(), or in it
  CHECK(stat->ppid == getpid());
}

}  // namespace
}  // namespace pkb
