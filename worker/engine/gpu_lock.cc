#include "worker/engine/gpu_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace pkb {

absl::StatusOr<GpuLock> GpuLock::Open(const std::string& cache_dir) {
  std::error_code ec;
  std::filesystem::create_directories(cache_dir, ec);
  const std::string path = cache_dir + "/gpus.lock";
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot open ", path, ": ", strerror(errno)));
  return GpuLock(fd);
}

GpuLock& GpuLock::operator=(GpuLock&& other) noexcept {
  if (this != &other) {
    Release();
    fd_ = other.fd_;
    held_ = other.held_;
    other.fd_ = -1;
    other.held_ = false;
  }
  return *this;
}

absl::StatusOr<bool> GpuLock::TryLock() {
  if (fd_ < 0) return absl::FailedPreconditionError("the GPU lock is not open");
  if (held_) return true;
  if (flock(fd_, LOCK_EX | LOCK_NB) == 0) {
    held_ = true;
    return true;
  }
  if (errno == EWOULDBLOCK) return false;
  return absl::InternalError(absl::StrCat("cannot lock the node's GPUs: ", strerror(errno)));
}

void GpuLock::Release() {
  if (fd_ >= 0) close(fd_);  // releases the flock
  fd_ = -1;
  held_ = false;
}

}  // namespace pkb
