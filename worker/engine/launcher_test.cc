#include "worker/engine/launcher.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <string>
#include <thread>

#include "common/files.h"
#include "common/subprocess.h"

namespace pkb {
namespace {

// The "rank binary" is sh running a script; the launcher's own arguments land in $0.., and
// PKB_RANK tells each copy which rank it is.
LaunchSpec ShellRanks(const std::string& script, int world, const std::string& dir) {
  LaunchSpec s;
  s.rank_binary = "/bin/sh";
  s.args = {"-c", script};
  s.world = world;
  s.scratch_dir = dir;
  s.timeout = absl::Seconds(20);
  s.grace_after_failure = absl::Milliseconds(500);
  return s;
}

TEST_CASE("all ranks succeed and rank 0's progress lines arrive", "[launcher]") {
  auto dir = MakeTempDir("/tmp/pkb-test", "launch-");
  REQUIRE(dir.ok());
  std::vector<std::string> progress;
  LaunchSpec s = ShellRanks("echo PKB-PROGRESS {\\\"trial\\\": $PKB_RANK}; echo other", 3, *dir);
  s.on_progress = [&](const std::string& l) {
    progress.push_back(l);
    return std::string();
  };
  auto r = RankLauncher().Run(s);
  REQUIRE(r.ok());
  CHECK_FALSE(r->timed_out);
  CHECK(r->first_failed == -1);
  REQUIRE(r->ranks.size() == 3);
  CHECK(progress == std::vector<std::string>{"{\"trial\": 0}"});  // rank 0 only
  CHECK(TailOfFile(r->ranks[0].log_path, 100).find("other") != std::string::npos);
  (void)RemoveTree(*dir);
}

TEST_CASE("rank 0 alone reads the answers to its progress lines", "[launcher]") {
  auto dir = MakeTempDir("/tmp/pkb-test", "launch-");
  REQUIRE(dir.ok());
  // Each rank says it is about to time (rank 0's line alone reaches the launcher), then reads a
  // line of its stdin and keeps what it read.
  const std::string script =
      "echo PKB-PROGRESS ready; read -r word; echo \"[$word]\" > " + *dir + "/word.$PKB_RANK";
  for (bool answer : {true, false}) {
    CAPTURE(answer);
    LaunchSpec s = ShellRanks(script, 3, *dir);
    s.answer_rank0 = answer;
    s.on_progress = [](const std::string& l) { return l == "ready" ? "go\n" : ""; };
    auto r = RankLauncher().Run(s);
    REQUIRE(r.ok());
    CHECK_FALSE(r->timed_out);
    std::ifstream w0(*dir + "/word.0"), w1(*dir + "/word.1"), w2(*dir + "/word.2");
    std::string word0, word1, word2;
    std::getline(w0, word0);
    std::getline(w1, word1);
    std::getline(w2, word2);
    CHECK(word0 == (answer ? "[go]" : "[]"));  // without answer_rank0, /dev/null
    CHECK(word1 == "[]");
    CHECK(word2 == "[]");
  }
  (void)RemoveTree(*dir);
}

TEST_CASE("an outcome is taken once the ranks left it, and they still end as always",
          "[launcher]") {
  auto dir = MakeTempDir("/tmp/pkb-test", "launch-");
  REQUIRE(dir.ok());
  // Each rank leaves its file, then takes a second to end (a device's teardown).
  LaunchSpec s = ShellRanks("touch " + *dir + "/done.$PKB_RANK; sleep 1", 3, *dir);
  int polls = 0;
  absl::Time taken;
  LaunchResult seen;
  s.settled = [&](const LaunchResult& so_far) {
    ++polls;
    for (int r = 0; r < 3; ++r) {
      if (access((*dir + "/done." + std::to_string(r)).c_str(), F_OK) != 0) return false;
    }
    taken = absl::Now();
    seen = so_far;
    return true;
  };
  auto r = RankLauncher().Run(s);
  const absl::Time ended = absl::Now();
  REQUIRE(r.ok());
  CHECK(r->settled);
  CHECK(polls >= 1);
  CHECK(ended - taken > absl::Milliseconds(500));  // taken while the ranks were still there
  // The run so far: no failure, every rank's log named, time counted from the launch.
  CHECK_FALSE(seen.timed_out);
  CHECK(seen.first_failed == -1);
  REQUIRE(seen.ranks.size() == 3);
  CHECK(seen.ranks[2].log_path == *dir + "/rank2.log");
  CHECK(seen.elapsed > absl::ZeroDuration());
  CHECK(seen.elapsed < r->elapsed);
  // Not polled once a rank has failed: its outcome waits for the ranks' end.
  s = ShellRanks("if [ $PKB_RANK = 1 ]; then exit 3; fi; sleep 1", 2, *dir);
  bool after_failure = false;
  s.settled = [&](const LaunchResult& so_far) {
    after_failure = after_failure || so_far.first_failed >= 0;
    return false;
  };
  r = RankLauncher().Run(s);
  REQUIRE(r.ok());
  CHECK_FALSE(r->settled);
  CHECK(r->first_failed == 1);
  CHECK_FALSE(after_failure);
  (void)RemoveTree(*dir);
}

TEST_CASE("a log's tail is read from regular files only, never blocking", "[launcher]") {
  auto dir = MakeTempDir("/tmp/pkb-test", "tail-");
  REQUIRE(dir.ok());
  const std::string log = *dir + "/rank0.log";
  REQUIRE(WriteFileAtomic(log, "first line\nthe last line\n").ok());
  CHECK(TailOfFile(log, 14) == "the last line\n");
  CHECK(TailOfFile(log, 1000) == "first line\nthe last line\n");
  CHECK(TailOfFile(*dir + "/none.log", 100).empty());
  // What a submission may plant where a log was (the scratch folder is its to write): a FIFO
  // that no one writes, a link.
  const std::string fifo = *dir + "/rank1.log";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(TailOfFile(fifo, 100).find("not a regular file") != std::string::npos);
  const std::string link = *dir + "/rank2.log";
  REQUIRE(symlink(log.c_str(), link.c_str()) == 0);
  CHECK(TailOfFile(link, 100).empty());
  (void)RemoveTree(*dir);
}

TEST_CASE("one crashing rank brings down the ranks blocked on it", "[launcher]") {
  auto dir = MakeTempDir("/tmp/pkb-test", "launch-");
  REQUIRE(dir.ok());
  // Rank 1 dies of SIGSEGV; the others would wait forever for it.
  auto s =
      ShellRanks("if [ $PKB_RANK = 1 ]; then echo dying >&2; kill -SEGV $$; fi; sleep 60", 4, *dir);
  auto r = RankLauncher().Run(s);
  REQUIRE(r.ok());
  CHECK_FALSE(r->timed_out);
  REQUIRE(r->first_failed == 1);
  CHECK(r->ranks[1].term_signal == SIGSEGV);
  CHECK(r->Describe(1).find("signal 11") != std::string::npos);
  CHECK(TailOfFile(r->ranks[1].log_path, 100).find("dying") != std::string::npos);
  CHECK(r->elapsed < absl::Seconds(10));
  (void)RemoveTree(*dir);
}

TEST_CASE("the wall-clock limit kills every rank and its children", "[launcher]") {
  auto dir = MakeTempDir("/tmp/pkb-test", "launch-");
  REQUIRE(dir.ok());
  auto s = ShellRanks("sleep 60 & echo $! > " + *dir + "/child.$PKB_RANK; wait", 2, *dir);
  s.timeout = absl::Milliseconds(800);
  auto r = RankLauncher().Run(s);
  REQUIRE(r.ok());
  CHECK(r->timed_out);
  for (int i = 0; i < 2; ++i) {
    auto pid = ReadFile(*dir + "/child." + std::to_string(i));
    REQUIRE(pid.ok());
    std::ifstream stat("/proc/" + std::to_string(std::stoi(*pid)) + "/stat");
    std::string line;
    bool running = std::getline(stat, line) && line[line.rfind(')') + 2] != 'Z';
    CHECK_FALSE(running);  // the grandchild is gone too
  }
  (void)RemoveTree(*dir);
}

TEST_CASE("behind a closed gate the limit waits and once open it runs", "[launcher][gate]") {
  auto dir = MakeTempDir("/tmp/pkb-test", "launch-");
  REQUIRE(dir.ok());
  // The ranks take 1.5 s; the limit is 0.8 s from the gate, which opens after 1.2 s.
  auto s = ShellRanks("sleep 1.5", 2, *dir);
  s.timeout = absl::Milliseconds(800);
  const absl::Time opens = absl::Now() + absl::Milliseconds(1200);
  s.gate = [&] { return absl::Now() >= opens ? Gate::kOpen : Gate::kClosed; };
  auto r = RankLauncher().Run(s);
  REQUIRE(r.ok());
  CHECK_FALSE(r->timed_out);
  CHECK_FALSE(r->called_off);
  CHECK(r->first_failed == -1);
  CHECK(r->before_gate >= absl::Milliseconds(1200));
  CHECK(r->before_gate < absl::Milliseconds(1500));
  // Open early, the same limit ends ranks that take too long.
  auto t = ShellRanks("sleep 30", 2, *dir);
  t.timeout = absl::Milliseconds(800);
  t.gate = [] { return Gate::kOpen; };
  auto late = RankLauncher().Run(t);
  REQUIRE(late.ok());
  CHECK(late->timed_out);
  CHECK(late->elapsed < absl::Seconds(5));
  (void)RemoveTree(*dir);
}

TEST_CASE("a called-off gate kills the ranks at once", "[launcher][gate]") {
  auto dir = MakeTempDir("/tmp/pkb-test", "launch-");
  REQUIRE(dir.ok());
  auto s = ShellRanks("sleep 60", 3, *dir);
  const absl::Time off = absl::Now() + absl::Milliseconds(300);
  s.gate = [&] { return absl::Now() >= off ? Gate::kCalledOff : Gate::kClosed; };
  auto r = RankLauncher().Run(s);
  REQUIRE(r.ok());
  CHECK(r->called_off);
  CHECK_FALSE(r->timed_out);
  CHECK(r->elapsed < absl::Seconds(3));
  (void)RemoveTree(*dir);
}

TEST_CASE("the caller's own child outlives the ranks' clean-up when it waits for it first",
          "[launcher][gate]") {
  auto dir = MakeTempDir("/tmp/pkb-test", "launch-");
  REQUIRE(dir.ok());
  // A child of ours that is not a rank (pkb-eval's compile): the clean-up of what the ranks left
  // behind would take it for an orphan, kill it and reap it. before_cleanup waits for it first.
  pid_t compile = fork();
  REQUIRE(compile >= 0);
  if (compile == 0) {
    usleep(700 * 1000);
    _exit(7);
  }
  int status = -1;
  pid_t reaped = -1;
  auto s = ShellRanks("true", 2, *dir);
  s.before_cleanup = [&] { reaped = waitpid(compile, &status, 0); };
  auto r = RankLauncher().Run(s);
  REQUIRE(r.ok());
  CHECK(reaped == compile);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 7);
  (void)RemoveTree(*dir);
}

TEST_CASE("the launcher's reaping of orphans spares RunSubprocess's children", "[launcher][gate]") {
  auto dir = MakeTempDir("/tmp/pkb-test", "launch-");
  REQUIRE(dir.ok());
  // pkb-eval's compile on another thread, still running when the ranks end.
  SubprocessOptions o;
  o.argv = {"sh", "-c", "sleep 1; exit 9"};
  absl::StatusOr<SubprocessResult> compile;
  std::thread compiling([&] { compile = RunSubprocess(o); });
  usleep(200 * 1000);
  auto r = RankLauncher().Run(ShellRanks("true", 2, *dir));
  REQUIRE(r.ok());
  compiling.join();
  REQUIRE(compile.ok());
  CHECK(compile->exit_code == 9);
  CHECK_FALSE(compile->signaled);
  (void)RemoveTree(*dir);
}

}  // namespace
}  // namespace pkb
