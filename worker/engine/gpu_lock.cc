#include "worker/engine/gpu_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace pkb {
namespace {

absl::StatusOr<int> OpenLockFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot open ", path, ": ", strerror(errno)));
  return fd;
}

// true: locked; false: another holder; an error otherwise.
absl::StatusOr<bool> TryFlock(int fd, int how) {
  if (flock(fd, how | LOCK_NB) == 0) return true;
  if (errno == EWOULDBLOCK) return false;
  return absl::InternalError(absl::StrCat("cannot lock the node's GPUs: ", strerror(errno)));
}

}  // namespace

absl::StatusOr<GpuLock> GpuLock::Open(const std::string& cache_dir,
                                      const std::vector<std::string>& uuids) {
  std::error_code ec;
  std::filesystem::create_directories(cache_dir, ec);
  absl::StatusOr<int> node = OpenLockFile(cache_dir + "/gpus.lock");
  if (!node.ok()) return node.status();
  GpuLock lock(*node, {});
  std::vector<std::string> sorted;
  for (const std::string& u : uuids) sorted.push_back(absl::AsciiStrToLower(u));
  std::sort(sorted.begin(), sorted.end());
  for (const std::string& u : sorted) {
    absl::StatusOr<int> fd = OpenLockFile(absl::StrCat(cache_dir, "/", u, ".lock"));  // gpu-...
    if (!fd.ok()) return fd.status();  // `lock` closes what it opened
    lock.gpu_fds_.push_back(*fd);
  }
  return lock;
}

GpuLock& GpuLock::operator=(GpuLock&& other) noexcept {
  if (this != &other) {
    Release();
    node_fd_ = std::exchange(other.node_fd_, -1);
    gpu_fds_ = std::move(other.gpu_fds_);
    other.gpu_fds_.clear();
    held_ = std::exchange(other.held_, false);
  }
  return *this;
}

absl::StatusOr<bool> GpuLock::TryLock() {
  if (node_fd_ < 0) return absl::FailedPreconditionError("the GPU lock is not open");
  if (held_) return true;
  // The whole node: gpus.lock alone, exclusively. A share: gpus.lock shared, then its GPUs in
  // order; any of it held elsewhere gives all of it back.
  absl::StatusOr<bool> got = TryFlock(node_fd_, gpu_fds_.empty() ? LOCK_EX : LOCK_SH);
  for (size_t i = 0; got.ok() && *got && i < gpu_fds_.size(); ++i)
    got = TryFlock(gpu_fds_[i], LOCK_EX);
  if (!got.ok() || !*got) {
    Unlock();
    return got;
  }
  held_ = true;
  return true;
}

void GpuLock::Unlock() {
  for (int fd : gpu_fds_) flock(fd, LOCK_UN);
  if (node_fd_ >= 0) flock(node_fd_, LOCK_UN);
}

void GpuLock::Release() {
  for (int fd : gpu_fds_) close(fd);  // closing releases the flocks
  gpu_fds_.clear();
  if (node_fd_ >= 0) close(node_fd_);
  node_fd_ = -1;
  held_ = false;
}

}  // namespace pkb
