// NodeCompiles on real files and real processes: a child process holds a compile's entry and
// burns CPU, stops (SIGSTOP) or dies, as another worker's compile would.
#include "worker/engine/node_compiles.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/files.h"

namespace pkb {
namespace {

const std::string kKeyA(64, 'a');
const std::string kKeyB(64, 'b');

// A child process that holds an entry of `key` in `dir` and burns CPU until killed. Returns once
// the entry is there.
pid_t StartCompileLike(const std::string& dir, const std::string& key) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    close(fds[0]);
    std::unique_ptr<NodeCompiles::Run> run = NodeCompiles(dir).Begin(key);
    const char ok = run ? '1' : '0';
    (void)!write(fds[1], &ok, 1);
    close(fds[1]);
    volatile uint64_t x = 0;
    while (true) x = x + 1;
  }
  close(fds[1]);
  char ok = 0;
  REQUIRE(read(fds[0], &ok, 1) == 1);
  close(fds[0]);
  REQUIRE(ok == '1');
  return child;
}

void Reap(pid_t child) {
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
}

// Time for a running child to get CPU time (counted in ticks of 10 ms), on a loaded machine too.
constexpr absl::Duration kRun = absl::Milliseconds(300);

int Entries(const std::string& dir, const std::string& suffix) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    n += absl::EndsWith(e.path().filename().string(), suffix);
  }
  return n;
}

TEST_CASE("node compiles: a run counts beside the evaluations it overlaps and the own key's never",
          "[node_compiles]") {
  auto tmp = MakeTempDir("/tmp/pkb-test", "node-compiles-");
  REQUIRE(tmp.ok());
  const std::string dir = *tmp + "/compiles";
  NodeCompiles node(dir);
  // No folder yet: no compile with a cache ran here.
  NodeCompiles::Mark empty = node.MarkNow();
  CHECK(node.RanBeside(empty, "") == 0);

  // A run over before the mark is not beside it; one that overlaps it is.
  {
    auto run = node.Begin(kKeyA);
    REQUIRE(run);
  }
  CHECK(Entries(dir, ".done") == 1);
  NodeCompiles::Mark after = node.MarkNow();
  CHECK(node.RanBeside(after, "") == 0);
  CHECK(node.RanBeside(empty, "") == 1);
  {
    auto run = node.Begin(kKeyB);
    REQUIRE(run);
    CHECK(Entries(dir, ".run") == 1);
    CHECK(node.RanBeside(after, "") == 1);     // running now
    CHECK(node.RanBeside(after, kKeyB) == 0);  // the evaluation's own source
  }
  CHECK(node.RanBeside(after, "") == 1);  // over now, but it ran beside
  CHECK(node.RanBeside(after, kKeyB) == 0);
  (void)RemoveTree(*tmp);
}

TEST_CASE("node compiles: a run stopped all along is not beside and one that ran between is",
          "[node_compiles]") {
  auto tmp = MakeTempDir("/tmp/pkb-test", "node-compiles-");
  REQUIRE(tmp.ok());
  const std::string dir = *tmp + "/compiles";
  NodeCompiles node(dir);
  const pid_t child = StartCompileLike(dir, kKeyA);
  // Burning CPU beside the mark's evaluation.
  NodeCompiles::Mark running = node.MarkNow();
  absl::SleepFor(kRun);
  CHECK(node.RanBeside(running, "") == 1);
  // Stopped before the mark and still stopped: nothing ran beside.
  REQUIRE(kill(child, SIGSTOP) == 0);
  absl::SleepFor(absl::Milliseconds(50));
  NodeCompiles::Mark stopped = node.MarkNow();
  absl::SleepFor(kRun);
  CHECK(node.RanBeside(stopped, "") == 0);
  // Resumed, ran, and stopped again (another job's timing): it ran beside.
  REQUIRE(kill(child, SIGCONT) == 0);
  absl::SleepFor(kRun);
  REQUIRE(kill(child, SIGSTOP) == 0);
  absl::SleepFor(absl::Milliseconds(20));
  CHECK(node.RanBeside(stopped, "") == 1);
  Reap(child);
  (void)RemoveTree(*tmp);
}

TEST_CASE("node compiles: a run whose process died is ended by the first reader",
          "[node_compiles]") {
  auto tmp = MakeTempDir("/tmp/pkb-test", "node-compiles-");
  REQUIRE(tmp.ok());
  const std::string dir = *tmp + "/compiles";
  NodeCompiles node(dir);
  const pid_t child = StartCompileLike(dir, kKeyA);
  NodeCompiles::Mark before = node.MarkNow();
  Reap(child);  // killed, its entry still says it runs
  CHECK(Entries(dir, ".run") == 1);
  CHECK(node.RanBeside(before, "") == 1);  // it ran beside that one
  CHECK(Entries(dir, ".run") == 0);        // ended by the reading
  NodeCompiles::Mark after = node.MarkNow();
  CHECK(node.RanBeside(after, "") == 0);  // and not beside a later one
  (void)RemoveTree(*tmp);
}

TEST_CASE(
    "node compiles: old entries go and stray files are ignored and an unreadable folder "
    "answers one",
    "[node_compiles]") {
  auto tmp = MakeTempDir("/tmp/pkb-test", "node-compiles-");
  REQUIRE(tmp.ok());
  const std::string dir = *tmp + "/compiles";
  std::filesystem::create_directories(dir);
  const int64_t now = absl::ToUnixNanos(absl::Now());
  const int64_t old = now - absl::ToInt64Nanoseconds(NodeCompiles::kKeep + absl::Minutes(1));
  const std::string old_done =
      absl::StrCat(dir, "/", old, ".1.0.", kKeyA.substr(0, 16), ".", old + 1000, ".done");
  const std::string young_done =
      absl::StrCat(dir, "/", now, ".1.1.", kKeyA.substr(0, 16), ".", now + 1000, ".done");
  for (const std::string& f : {old_done, young_done, dir + "/notes.txt", dir + "/1.2.3.run"}) {
    std::ofstream(f) << "";
  }
  NodeCompiles node(dir);
  NodeCompiles::Mark long_ago{absl::FromUnixNanos(old - 1), {}};
  CHECK(node.RanBeside(long_ago, "") == 2);  // the two entries; the stray files are none
  {
    auto run = node.Begin(kKeyB);
    REQUIRE(run);
  }
  CHECK(!std::filesystem::exists(old_done));
  CHECK(std::filesystem::exists(young_done));
  CHECK(std::filesystem::exists(dir + "/notes.txt"));
  CHECK(node.RanBeside(long_ago, "") == 2);  // the young one and kKeyB's
  // A folder that cannot be listed: not known to be none.
  NodeCompiles file(dir + "/notes.txt");
  CHECK(file.RanBeside(file.MarkNow(), "") == 1);
  CHECK(file.Begin(kKeyA) == nullptr);
  (void)RemoveTree(*tmp);
}

}  // namespace
}  // namespace pkb
