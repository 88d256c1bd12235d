// ScratchRoot on a real folder: a worker killed with SIGKILL (a forked child) leaves its folder
// behind; the next worker to start removes it, and leaves a live worker's folder alone.
#include "worker/daemon/scratch_root.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "common/files.h"

namespace pkb {
namespace {

namespace fs = std::filesystem;

struct Scratch {
  Scratch() { dir = *MakeTempDir("/tmp", "pkb-scratch-root-test"); }
  ~Scratch() { RemoveTree(dir).IgnoreError(); }
  std::string dir;
};

// A worker that makes its folder and a job folder in it, then dies by SIGKILL: its folder's path.
std::string KilledWorkerFolder(const std::string& scratch) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    auto root = ScratchRoot::Create(scratch, "dead worker");
    if (!root.ok()) _exit(1);
    std::string job = (*root)->path() + "/job-1";
    fs::create_directories(job + "/compile-1");
    if (!WriteFileAtomic(job + "/candidate.cu", "x").ok()) _exit(1);
    (void)!write(fds[1], (*root)->path().data(), (*root)->path().size());
    close(fds[1]);
    raise(SIGKILL);  // no destructor runs, as with kill -9
    _exit(2);
  }
  close(fds[1]);
  std::string path;
  char buf[512];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) path.append(buf, n);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(WTERMSIG(status) == SIGKILL);
  return path;
}

TEST_CASE("a dead worker's folder is removed at start, a live worker's is not", "[scratch]") {
  Scratch s;
  auto live = ScratchRoot::Create(s.dir, "live");
  REQUIRE(live.ok());
  const std::string live_job = (*live)->path() + "/job-live";
  fs::create_directories(live_job);
  const std::string dead = KilledWorkerFolder(s.dir);
  REQUIRE(fs::exists(dead + "/job-1/candidate.cu"));
  // Not ours to judge: anything else in the shared scratch folder, links included.
  const std::string other = s.dir + "/job-of-someone-else";
  fs::create_directories(other);
  fs::create_directory_symlink(dead, s.dir + "/pkb-worker-link");

  std::vector<std::string> removed;
  auto next = ScratchRoot::Create(s.dir, "dead worker", &removed);
  REQUIRE(next.ok());
  CHECK(removed == std::vector<std::string>{dead});
  CHECK(!fs::exists(dead));
  CHECK(fs::exists(live_job));
  CHECK(fs::exists(other));
  CHECK(fs::is_symlink(s.dir + "/pkb-worker-link"));
  CHECK((*next)->path() != dead);
  CHECK(fs::path((*next)->path()).filename().string().rfind("pkb-worker-dead_worker-", 0) == 0);
  // The sandbox's uid passes through to the job folders.
  CHECK((fs::status((*next)->path()).permissions() & fs::perms::others_exec) != fs::perms::none);

  // A drained worker leaves nothing; the live one's folder goes when it does.
  const std::string next_path = (*next)->path();
  next->reset();
  CHECK(!fs::exists(next_path));
  const std::string live_path = (*live)->path();
  live->reset();
  CHECK(!fs::exists(live_path));
}

TEST_CASE("a folder still being made is not taken for a leftover", "[scratch]") {
  Scratch s;
  // A worker between making its folder and locking it: no owner file yet, or one not locked yet.
  const std::string bare = s.dir + "/.pkb-worker-new-a-123456";
  const std::string unlocked = s.dir + "/.pkb-worker-new-b-123456";
  fs::create_directories(bare);
  fs::create_directories(unlocked);
  REQUIRE(WriteFileAtomic(unlocked + "/.owner", "").ok());
  auto removed = RemoveDeadWorkerFolders(s.dir);
  REQUIRE(removed.ok());
  CHECK(removed->empty());
  CHECK(fs::exists(bare));
  CHECK(fs::exists(unlocked));
  // Left like that for long, its worker died there.
  for (const auto& d : {bare, unlocked})
    fs::last_write_time(d, fs::file_time_type::clock::now() - std::chrono::minutes(5));
  removed = RemoveDeadWorkerFolders(s.dir);
  REQUIRE(removed.ok());
  CHECK(removed->size() == 2);
  CHECK(!fs::exists(bare));
  CHECK(!fs::exists(unlocked));
}

}  // namespace
}  // namespace pkb
