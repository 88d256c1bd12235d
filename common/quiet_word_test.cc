#include "common/quiet_word.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "common/files.h"

namespace pkb {
namespace {

struct Fifo {
  Fifo() {
    dir = *MakeTempDir("/tmp", "quiet-");
    path = dir + "/quiet.fifo";
    REQUIRE(mkfifo(path.c_str(), 0600) == 0);
  }
  ~Fifo() { RemoveTree(dir).IgnoreError(); }
  std::string dir, path;
};

TEST_CASE("the worker's word reaches the listening engine, one word per wait", "[quiet]") {
  Fifo f;
  absl::StatusOr<QuietListener> l = QuietListener::Open(f.path);
  REQUIRE(l.ok());
  REQUIRE(TellQuiet(f.path, 2).ok());
  REQUIRE(TellQuiet(f.path, 0).ok());
  CHECK(l->Await(absl::Seconds(1)) == 2);
  CHECK(l->Await(absl::Seconds(1)) == 0);
  // No third word: the wait ends at its limit, not at the writers' close.
  const absl::Time t0 = absl::Now();
  CHECK(!l->Await(absl::Milliseconds(200)).has_value());
  CHECK(absl::Now() - t0 >= absl::Milliseconds(190));
}

TEST_CASE("a word written while the engine waits ends the wait at once", "[quiet]") {
  Fifo f;
  absl::StatusOr<QuietListener> l = QuietListener::Open(f.path);
  REQUIRE(l.ok());
  std::thread worker([&] {
    absl::SleepFor(absl::Milliseconds(100));
    CHECK(TellQuiet(f.path, 3).ok());
  });
  const absl::Time t0 = absl::Now();
  CHECK(l->Await(absl::Seconds(10)) == 3);
  CHECK(absl::Now() - t0 < absl::Seconds(5));
  worker.join();
}

TEST_CASE("no engine listening: the worker's word fails, naming the FIFO", "[quiet]") {
  Fifo f;
  absl::Status s = TellQuiet(f.path, 1);
  CHECK(absl::IsUnavailable(s));
  CHECK(std::string(s.message()).find(f.path) != std::string::npos);
  CHECK(!TellQuiet(f.dir + "/missing", 1).ok());
  CHECK(!QuietListener::Open(f.dir + "/missing").ok());
}

TEST_CASE("what is not a word is no word", "[quiet]") {
  Fifo f;
  absl::StatusOr<QuietListener> l = QuietListener::Open(f.path);
  REQUIRE(l.ok());
  {
    const int fd = open(f.path.c_str(), O_WRONLY | O_NONBLOCK);
    REQUIRE(fd >= 0);
    const std::string junk = "loud 1\nquiet -4\nquiet x\n" + std::string(100, 'q');
    REQUIRE(write(fd, junk.data(), junk.size()) == static_cast<ssize_t>(junk.size()));
    close(fd);
  }
  CHECK(!l->Await(absl::Milliseconds(100)).has_value());
  CHECK(!l->Await(absl::Milliseconds(100)).has_value());
  CHECK(!l->Await(absl::Milliseconds(100)).has_value());
  // 100 bytes without an end: no word, at once rather than at the limit.
  const absl::Time t0 = absl::Now();
  CHECK(!l->Await(absl::Seconds(5)).has_value());
  CHECK(absl::Now() - t0 < absl::Seconds(2));
}

TEST_CASE("the judge takes the engine's word and nothing else for it", "[quiet]") {
  const std::string word = GoWord(std::string(32, 'k'));
  CHECK(word.size() == 3 + 64 + 1);  // "go ", a hex MAC, the end of line
  CHECK(word != GoWord(std::string(32, 'j')));
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  // Would-be words first (what else might reach the judge's stdin), then the engine's.
  const std::string forged = "go\n\ngo 0000\n" + std::string(300, 'x') + "\n" +
                             word.substr(0, word.size() - 2) + "\n" + word.substr(1);
  REQUIRE(write(fds[1], forged.data(), forged.size()) == static_cast<ssize_t>(forged.size()));
  CHECK(!AwaitGoWord(fds[0], word, absl::Milliseconds(300)));  // none of them is the word
  // The word after bytes without an end of line (a piece of one left on the pipe) still counts.
  const std::string late = "half a line " + word;
  REQUIRE(write(fds[1], late.data(), late.size()) == static_cast<ssize_t>(late.size()));
  CHECK(AwaitGoWord(fds[0], word, absl::Seconds(5)));
  // The stream's end: no word, at once.
  close(fds[1]);
  const absl::Time t0 = absl::Now();
  CHECK(!AwaitGoWord(fds[0], word, absl::Seconds(5)));
  CHECK(absl::Now() - t0 < absl::Seconds(2));
  close(fds[0]);
}

}  // namespace
}  // namespace pkb
