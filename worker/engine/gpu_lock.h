// The node's GPU lock: one evaluation at a time on a node's GPUs. Inside its sandbox a judge sees
// only its own job's processes on the GPU (the driver lists a PID namespace's own), so another
// job's work during its timing would go unseen. Every pkb-eval of the node takes this lock before
// its ranks touch a GPU and holds it until its verdict is out; standby ranks that set up their
// devices early (StartStandby) hold it from before they start.
//
//   PKB_ASSIGN_OR_RETURN(GpuLock lock, GpuLock::Open(cache_dir));
//   PKB_ASSIGN_OR_RETURN(bool held, lock.TryLock());   // flock on <cache_dir>/gpus.lock
//
// Released when the object goes (or the process ends: the kernel drops the flock).
#ifndef PKB_WORKER_ENGINE_GPU_LOCK_H_
#define PKB_WORKER_ENGINE_GPU_LOCK_H_

#include <string>

#include "absl/status/statusor.h"

namespace pkb {

class GpuLock {
 public:
  // Opens (creating it and `cache_dir` as needed) the node's lock file; not locked yet.
  static absl::StatusOr<GpuLock> Open(const std::string& cache_dir);

  GpuLock() = default;
  GpuLock(GpuLock&& other) noexcept : fd_(other.fd_), held_(other.held_) {
    other.fd_ = -1;
    other.held_ = false;
  }
  GpuLock& operator=(GpuLock&& other) noexcept;
  GpuLock(const GpuLock&) = delete;
  GpuLock& operator=(const GpuLock&) = delete;
  ~GpuLock() { Release(); }

  // Takes the lock unless another process holds it: true when held now.
  absl::StatusOr<bool> TryLock();
  bool held() const { return held_; }
  void Release();

 private:
  explicit GpuLock(int fd) : fd_(fd) {}
  int fd_ = -1;
  bool held_ = false;
};

}  // namespace pkb

#endif  // PKB_WORKER_ENGINE_GPU_LOCK_H_
