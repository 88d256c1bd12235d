#include "worker/engine/launcher.h"

#include <signal.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "common/files.h"

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
  s.on_progress = [&](const std::string& l) { progress.push_back(l); };
  auto r = RankLauncher().Run(s);
  REQUIRE(r.ok());
  CHECK_FALSE(r->timed_out);
  CHECK(r->first_failed == -1);
  REQUIRE(r->ranks.size() == 3);
  CHECK(progress == std::vector<std::string>{"{\"trial\": 0}"});  // rank 0 only
  CHECK(TailOfFile(r->ranks[0].log_path, 100).find("other") != std::string::npos);
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

}  // namespace
}  // namespace pkb
