// The node's GPU lock: one evaluation at a time on a GPU. Inside its sandbox a judge sees only its
// own job's processes on the GPU (the driver lists a PID namespace's own), so another job's work
// during its timing would go unseen. Every pkb-eval of the node takes this lock before its ranks
// touch a GPU and holds it until its verdict is out; standby ranks that set up their devices early
// (StartStandby) hold it from before they start.
//
// Without a share of the node's GPUs (pkb-eval --gpus, gpu_select.h) the lock is the whole node's:
// <cache_dir>/gpus.lock held exclusively. With one, <cache_dir>/gpus.lock is held shared (no
// whole-node evaluation runs meanwhile) and <cache_dir>/<uuid>.lock (the UUID in lower case:
// gpu-8f0e....lock) exclusively for each GPU of the share, so evaluations on disjoint shares run
// at once and those of overlapping ones wait for each other. Taken all at once or not at all (no
// holder waits while holding part of it: no deadlock).
//
//   PKB_ASSIGN_OR_RETURN(GpuLock lock, GpuLock::Open(cache_dir, uuids));  // uuids: {} = node
//   PKB_ASSIGN_OR_RETURN(bool held, lock.TryLock());
//
// Released when the object goes (or the process ends: the kernel drops the flocks).
#ifndef PKB_WORKER_ENGINE_GPU_LOCK_H_
#define PKB_WORKER_ENGINE_GPU_LOCK_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace pkb {

class GpuLock {
 public:
  // Opens (creating them and `cache_dir` as needed) the lock files of the node, or of the share
  // `uuids` of its GPUs; not locked yet.
  static absl::StatusOr<GpuLock> Open(const std::string& cache_dir,
                                      const std::vector<std::string>& uuids = {});

  GpuLock() = default;
  GpuLock(GpuLock&& other) noexcept
      : node_fd_(std::exchange(other.node_fd_, -1)),
        gpu_fds_(std::move(other.gpu_fds_)),
        held_(std::exchange(other.held_, false)) {
    other.gpu_fds_.clear();
  }
  GpuLock& operator=(GpuLock&& other) noexcept;
  GpuLock(const GpuLock&) = delete;
  GpuLock& operator=(const GpuLock&) = delete;
  ~GpuLock() { Release(); }

  // Takes the lock unless another process holds any of it: true when held now.
  absl::StatusOr<bool> TryLock();
  bool held() const { return held_; }
  void Release();

 private:
  GpuLock(int node_fd, std::vector<int> gpu_fds)
      : node_fd_(node_fd), gpu_fds_(std::move(gpu_fds)) {}
  // Drops the flocks, keeps the files open (TryLock again later).
  void Unlock();
  int node_fd_ = -1;
  std::vector<int> gpu_fds_;  // one per GPU of the share, in UUID order; empty: the whole node
  bool held_ = false;
};

}  // namespace pkb

#endif  // PKB_WORKER_ENGINE_GPU_LOCK_H_
