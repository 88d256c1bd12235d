// NodeCompiles on real files and real processes: a child process holds a compile's entry and
// burns CPU, stops (SIGSTOP) or dies, as another worker's compile would.
#include "worker/engine/node_compiles.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/files.h"

namespace pkb {
namespace {

const std::string kKeyA(64, 'a');
const std::string kKeyB(64, 'b');

void Burn(absl::Duration d) {
  volatile uint64_t x = 0;
  for (const absl::Time end = absl::Now() + d; absl::Now() < end;) x = x + 1;
}

// A child process that holds an entry of `key` in `dir` until killed, as pkb-eval holds one
// while its compiler runs. It burns CPU itself, or (`compiler_until` an open pipe's read end)
// starts a process that burns until the pipe's write end closes, waits for it and then idles,
// as pkb-eval waits for nvcc. Returns once the entry is there.
pid_t StartCompileLike(const std::string& dir, const std::string& key,
                       const int* compiler_until = nullptr) {
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
    if (compiler_until == nullptr) {
      while (true) Burn(absl::Seconds(1));
    }
    close(compiler_until[1]);  // the test's: its close says stop
    const pid_t compiler = fork();
    if (compiler == 0) {
      pollfd until{compiler_until[0], POLLIN, 0};
      while (poll(&until, 1, 0) == 0) Burn(absl::Milliseconds(10));
      _exit(0);
    }
    close(compiler_until[0]);
    waitpid(compiler, nullptr, 0);  // its CPU time becomes this process's children's
    while (true) pause();
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

// Stops `child` and returns once it is stopped.
void Stop(pid_t child) {
  REQUIRE(kill(child, SIGSTOP) == 0);
  int status = 0;
  REQUIRE(waitpid(child, &status, WUNTRACED) == child);
  REQUIRE(WIFSTOPPED(status));
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

// A test's own folder, removed at the end of its scope (also where a check gives up).
struct TempFolder {
  TempFolder() {
    absl::StatusOr<std::string> made = MakeTempDir("/tmp/pkb-test", "node-compiles-");
    REQUIRE(made.ok());
    path = *made;
  }
  ~TempFolder() { (void)RemoveTree(path); }
  std::string path;
};

TEST_CASE("node compiles: a run counts beside the evaluations it overlaps and the own key's never",
          "[node_compiles]") {
  TempFolder tmp;
  const std::string dir = tmp.path + "/compiles";
  NodeCompiles node(dir);
  // No folder yet: no compile with a cache ran here.
  NodeCompiles::Mark empty = node.MarkNow();
  CHECK(node.RanBeside(empty, "") == 0);

  // A run over before the mark is not beside it; one that overlaps it is.
  {
    auto run = node.Begin(kKeyA);
    REQUIRE(run);
  }
  CHECK(Entries(dir, ".done") == 1);  // its end's marker, beside its run's file
  CHECK(Entries(dir, ".run") == 1);
  NodeCompiles::Mark after = node.MarkNow();
  CHECK(node.RanBeside(after, "") == 0);
  CHECK(node.RanBeside(empty, "") == 1);
  {
    auto run = node.Begin(kKeyB);
    REQUIRE(run);
    CHECK(Entries(dir, ".run") == 2);
    CHECK(node.RanBeside(after, "") == 1);     // running now
    CHECK(node.RanBeside(after, kKeyB) == 0);  // the evaluation's own source
  }
  CHECK(node.RanBeside(after, "") == 1);  // over now, but it ran beside
  CHECK(node.RanBeside(after, kKeyB) == 0);
}

TEST_CASE("node compiles: a run stopped all along is not beside and one that ran between is",
          "[node_compiles]") {
  TempFolder tmp;
  const std::string dir = tmp.path + "/compiles";
  NodeCompiles node(dir);
  const pid_t child = StartCompileLike(dir, kKeyA);
  // Burning CPU beside the mark's evaluation.
  NodeCompiles::Mark running = node.MarkNow();
  absl::SleepFor(kRun);
  CHECK(node.RanBeside(running, "") == 1);
  // Stopped before the mark and still stopped: nothing ran beside.
  Stop(child);
  NodeCompiles::Mark stopped = node.MarkNow();
  absl::SleepFor(kRun);
  CHECK(node.RanBeside(stopped, "") == 0);
  // Resumed, ran, and stopped again (another job's timing): it ran beside.
  REQUIRE(kill(child, SIGCONT) == 0);
  absl::SleepFor(kRun);
  Stop(child);
  CHECK(node.RanBeside(stopped, "") == 1);
  Reap(child);
}

TEST_CASE("node compiles: a run's CPU time is its processes' with the children they reaped",
          "[node_compiles]") {
  TempFolder tmp;
  const std::string dir = tmp.path + "/compiles";
  NodeCompiles node(dir);
  // The entry's process idles while its compiler burns, from before the mark until told to
  // stop; the compiler then ends and is reaped.
  int until[2];
  REQUIRE(pipe(until) == 0);
  const pid_t child = StartCompileLike(dir, kKeyA, until);
  close(until[0]);
  NodeCompiles::Mark compiling = node.MarkNow();
  absl::SleepFor(kRun);
  close(until[1]);
  absl::SleepFor(kRun);  // ended and reaped
  CHECK(node.RanBeside(compiling, "") == 1);
  // From then on nothing of it uses the CPU: running, but not beside a later evaluation.
  NodeCompiles::Mark idle = node.MarkNow();
  absl::SleepFor(kRun);
  CHECK(node.RanBeside(idle, "") == 0);
  Reap(child);
}

TEST_CASE("node compiles: a run of another PID namespace is counted even where it looks stopped",
          "[node_compiles]") {
  TempFolder tmp;
  const std::string dir = tmp.path + "/compiles";
  std::filesystem::create_directories(dir);
  // A stopped process of this namespace, named by two entries held (locked) by this test: one of
  // this namespace, one of another, whose pid would name some process there.
  const pid_t child = StartCompileLike(tmp.path + "/unused", kKeyB);
  Stop(child);
  struct stat ns;
  REQUIRE(stat("/proc/self/ns/pid", &ns) == 0);
  std::vector<int> held;
  const int64_t now = absl::ToUnixNanos(absl::Now());
  for (uint64_t entry_ns :
       {static_cast<uint64_t>(ns.st_ino), static_cast<uint64_t>(ns.st_ino) + 1}) {
    const std::string path = absl::StrCat(dir, "/", now, ".", child, ".", held.size(), ".",
                                          kKeyA.substr(0, 16), ".", entry_ns, ".run");
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT, 0644);
    REQUIRE(fd >= 0);
    REQUIRE(flock(fd, LOCK_EX) == 0);
    held.push_back(fd);
  }
  NodeCompiles node(dir);
  NodeCompiles::Mark mark = node.MarkNow();
  absl::SleepFor(absl::Milliseconds(50));
  CHECK(node.RanBeside(mark, "") == 1);  // the other namespace's
  for (int fd : held) close(fd);
  Reap(child);
}

TEST_CASE("node compiles: a run whose process died is ended by the first reader",
          "[node_compiles]") {
  TempFolder tmp;
  const std::string dir = tmp.path + "/compiles";
  NodeCompiles node(dir);
  const pid_t child = StartCompileLike(dir, kKeyA);
  NodeCompiles::Mark before = node.MarkNow();
  Reap(child);  // killed, its entry still says it runs
  CHECK(Entries(dir, ".run") == 1);
  CHECK(Entries(dir, ".done") == 0);
  CHECK(node.RanBeside(before, "") == 1);  // it ran beside that one
  CHECK(Entries(dir, ".done") == 1);       // ended by the reading
  CHECK(Entries(dir, ".run") == 1);        // its file stays (never renamed)
  NodeCompiles::Mark after = node.MarkNow();
  CHECK(node.RanBeside(after, "") == 0);  // and not beside a later one
}

TEST_CASE("node compiles: a run with two ends' markers counts once and ended at the earlier",
          "[node_compiles]") {
  TempFolder tmp;
  const std::string dir = tmp.path + "/compiles";
  std::filesystem::create_directories(dir);
  // Its process marked its end after a reader listed the folder, and the reader, finding the
  // run's file free and no marker, ended it with a marker of its own, later.
  const int64_t now = absl::ToUnixNanos(absl::Now());
  const std::string base =
      absl::StrCat(dir, "/", now - 3'000'000'000, ".1.0.", kKeyA.substr(0, 16), ".0");
  for (const std::string& f : {base + ".run", absl::StrCat(base, ".", now - 2'000'000'000, ".done"),
                               absl::StrCat(base, ".", now, ".done")}) {
    std::ofstream(f) << "";
  }
  NodeCompiles node(dir);
  CHECK(node.RanBeside({absl::FromUnixNanos(now - 4'000'000'000), {}}, "") == 1);
  CHECK(node.RanBeside({absl::FromUnixNanos(now - 1'000'000'000), {}}, "") == 0);
  CHECK(Entries(dir, ".done") == 2);  // nothing more was marked
}

TEST_CASE(
    "node compiles: old entries go and stray files are ignored and an unreadable folder "
    "answers one",
    "[node_compiles]") {
  TempFolder tmp;
  const std::string dir = tmp.path + "/compiles";
  std::filesystem::create_directories(dir);
  const int64_t now = absl::ToUnixNanos(absl::Now());
  const int64_t old = now - absl::ToInt64Nanoseconds(NodeCompiles::kEntryLife + absl::Minutes(1));
  const std::string old_done =
      absl::StrCat(dir, "/", old, ".1.0.", kKeyA.substr(0, 16), ".0.", old + 1000, ".done");
  const std::string young_done =
      absl::StrCat(dir, "/", now, ".1.1.", kKeyA.substr(0, 16), ".0.", now + 1000, ".done");
  // As an engine of before the namespace field named them.
  const std::string unnamed_ns_done =
      absl::StrCat(dir, "/", now, ".1.2.", kKeyA.substr(0, 16), ".", now + 1000, ".done");
  // A run's file with its end's marker, as this engine leaves them: one old, one young.
  const std::string old_base = absl::StrCat(dir, "/", old, ".1.3.", kKeyA.substr(0, 16), ".0");
  const std::string young_base = absl::StrCat(dir, "/", now, ".1.4.", kKeyA.substr(0, 16), ".0");
  for (const std::string& f :
       {old_done, young_done, unnamed_ns_done, old_base + ".run",
        absl::StrCat(old_base, ".", old + 1000, ".done"), young_base + ".run",
        absl::StrCat(young_base, ".", now + 1000, ".done"), dir + "/notes.txt",
        dir + "/1.2.3.run"}) {
    std::ofstream(f) << "";
  }
  NodeCompiles node(dir);
  NodeCompiles::Mark long_ago{absl::FromUnixNanos(old - 1), {}};
  CHECK(node.RanBeside(long_ago, "") == 5);  // the five runs; the stray files are none
  {
    auto run = node.Begin(kKeyB);
    REQUIRE(run);
  }
  CHECK(!std::filesystem::exists(old_done));
  CHECK(!std::filesystem::exists(old_base + ".run"));
  CHECK(Entries(dir, ".done") == 4);  // young_done, unnamed_ns_done, young_base's and kKeyB's
  CHECK(std::filesystem::exists(young_done));
  CHECK(std::filesystem::exists(young_base + ".run"));
  CHECK(std::filesystem::exists(dir + "/notes.txt"));
  CHECK(std::filesystem::exists(unnamed_ns_done));
  CHECK(node.RanBeside(long_ago, "") == 4);  // the young ones and kKeyB's
  // A folder that cannot be listed: not known to be none.
  NodeCompiles file(dir + "/notes.txt");
  std::string unread;
  CHECK(file.RanBeside(file.MarkNow(), "", &unread) == 1);
  CHECK(unread.find("notes.txt") != std::string::npos);  // and says which, and why
  // A folder not made yet is no compile: none.
  unread.clear();
  CHECK(NodeCompiles(dir + "/not/made/yet").RanBeside(node.MarkNow(), "", &unread) == 0);
  CHECK(unread.empty());
  CHECK(file.Begin(kKeyA) == nullptr);
}

TEST_CASE("node compiles: a listing beside runs' ends never misses a run that overlaps the mark",
          "[node_compiles]") {
  TempFolder tmp;
  const std::string dir = tmp.path + "/compiles";
  NodeCompiles node(dir);
  // One run after another, each a few hundred microseconds, with no time between: whenever a
  // reader lists the folder, some run overlapping its mark may be ending. (Where a run's file was
  // renamed at its end, 12 to 22 readings of about 1,500 found none, on ext4; whether a listing
  // misses a renamed file depends on the file system's order.)
  std::atomic<bool> stop{false};
  std::atomic<int> runs{0};
  std::atomic<bool> started{false};
  std::thread compiles([&] {
    std::unique_ptr<NodeCompiles::Run> run = node.Begin(kKeyA);
    started = true;
    while (!stop) {
      Burn(absl::Microseconds(200));
      std::unique_ptr<NodeCompiles::Run> next = node.Begin(kKeyA);  // before this one ends
      run = std::move(next);
      ++runs;
    }
  });
  absl::Cleanup joined = [&] {  // also where a check below gives up
    stop = true;
    compiles.join();
  };
  while (!started) absl::SleepFor(absl::Milliseconds(1));
  int missed = 0, reads = 0;
  for (const absl::Time end = absl::Now() + absl::Seconds(2); absl::Now() < end; ++reads) {
    // A mark without the runs' CPU times: a run is counted whether or not it used any since.
    NodeCompiles::Mark mark{absl::Now(), {}};
    missed += node.RanBeside(mark, "") == 0;
  }
  std::move(joined).Invoke();
  INFO(reads << " readings beside " << runs << " runs");
  CHECK(runs > 100);
  CHECK(reads > 200);
  CHECK(missed == 0);
}

}  // namespace
}  // namespace pkb
