#include "common/quiet_word.h"

#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/hash.h"

namespace pkb {

absl::StatusOr<QuietListener> QuietListener::Open(const std::string& path) {
  const int r = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (r < 0) return absl::InternalError(absl::StrCat("cannot open ", path, ": ", strerror(errno)));
  const int w = open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (w < 0) {
    const int error = errno;
    close(r);
    return absl::InternalError(absl::StrCat("cannot open ", path, ": ", strerror(error)));
  }
  return QuietListener(r, w);
}

QuietListener::QuietListener(QuietListener&& other) noexcept
    : read_fd_(std::exchange(other.read_fd_, -1)),
      write_fd_(std::exchange(other.write_fd_, -1)),
      pending_(std::move(other.pending_)) {}

QuietListener& QuietListener::operator=(QuietListener&& other) noexcept {
  std::swap(read_fd_, other.read_fd_);
  std::swap(write_fd_, other.write_fd_);
  std::swap(pending_, other.pending_);
  return *this;  // `other` closes what this held
}

QuietListener::~QuietListener() {
  if (read_fd_ >= 0) close(read_fd_);
  if (write_fd_ >= 0) close(write_fd_);
}

std::optional<int> QuietListener::Await(absl::Duration limit) {
  const absl::Time end = absl::Now() + limit;
  size_t eol;
  while ((eol = pending_.find('\n')) == std::string::npos) {
    if (pending_.size() > 64) return std::nullopt;  // no word is this long
    const int64_t left_ms = absl::ToInt64Milliseconds(end - absl::Now());
    pollfd pfd{read_fd_, POLLIN, 0};
    const int ready = poll(&pfd, 1, static_cast<int>(std::max<int64_t>(0, left_ms)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return std::nullopt;
    char buf[64];
    const ssize_t n = read(read_fd_, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return std::nullopt;
    pending_.append(buf, static_cast<size_t>(n));
  }
  const std::string line = pending_.substr(0, eol);
  pending_.erase(0, eol + 1);
  int count = 0;
  if (!absl::StartsWith(line, "quiet ") || !absl::SimpleAtoi(line.substr(6), &count) || count < 0) {
    return std::nullopt;
  }
  return count;
}

absl::Status TellQuiet(const std::string& path, int compiles_beside) {
  const int fd = open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("no engine listens on ", path, ": ", strerror(errno)));
  }
  const std::string word = absl::StrCat("quiet ", compiles_beside, "\n");
  const ssize_t n = write(fd, word.data(), word.size());
  const int error = errno;
  close(fd);
  if (n != static_cast<ssize_t>(word.size())) {
    return absl::InternalError(absl::StrCat("cannot write to ", path, ": ", strerror(error)));
  }
  return absl::OkStatus();
}

std::string GoWord(std::string_view report_key) {
  // A key of its own, derived from the report key, so that the word is no report's MAC.
  const std::string key = HmacSha256(report_key, "pkb quiet word key");
  return absl::StrCat("go ", absl::BytesToHexString(HmacSha256(key, "go")), "\n");
}

bool AwaitGoWord(int fd, const std::string& word, absl::Duration limit) {
  const absl::Time end = absl::Now() + limit;
  // The last word.size() bytes: the word is taken where a line ends in it, whatever came before
  // on that line (a MAC: nothing else ends so).
  std::string tail;
  for (;;) {
    const int64_t left_ms = absl::ToInt64Milliseconds(end - absl::Now());
    if (left_ms <= 0) return false;
    pollfd pfd{fd, POLLIN, 0};
    const int ready = poll(&pfd, 1, static_cast<int>(left_ms));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return false;
    char c = 0;
    const ssize_t n = read(fd, &c, 1);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return false;
    tail += c;
    if (tail.size() > word.size()) tail.erase(0, tail.size() - word.size());
    if (c == '\n' && !word.empty() && tail == word) return true;
  }
}

}  // namespace pkb
