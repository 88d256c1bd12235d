// What a rank process needs from its device: a stream, per-iteration timers, the collective
// backend for references, and symmetric memory for candidates. Two implementations: CUDA + NCCL
// (rank_device_cuda.cc, GPU nodes) and CPU + MPI (rank_device_cpu.cc, used where there is no GPU:
// CI runs the whole verify/benchmark path there with CPU test candidates).
#ifndef PKB_WORKER_ENGINE_RANK_DEVICE_H_
#define PKB_WORKER_ENGINE_RANK_DEVICE_H_

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pkb/candidate.h"
#include "pkb/v1/profile.pb.h"
#include "problems/harness/comm.h"
#include "problems/harness/problem.h"
#include "worker/engine/byte_moves.h"
#include "worker/engine/gpu_watch.h"

namespace pkb {

struct RankIdentity {
  int rank = 0;
  int world = 1;
  std::string rendezvous_dir;  // job scratch folder shared by the ranks (CUDA: IPC and NCCL ids)
  // A barrier of all ranks, for symmetric memory on CPU (the candidate host's: through its judge).
  std::function<absl::Status()> barrier;
  // CUDA: rank processes share GPUs (rank r on GPU r mod G). NCCL refuses two ranks of one
  // communicator on one GPU, so the judges' collectives go through host-staged MPI (StagedComm)
  // and there is no NCCL communicator (nccl_comm() is null).
  bool share_gpu = false;
};

class RankDevice {
 public:
  virtual ~RankDevice() = default;

  virtual at::Device device() const = 0;
  virtual std::string name() const = 0;
  virtual double l2_bytes() const = 0;
  // Memory the timed input sets may use: device memory free now (CUDA), or this rank's share
  // of the host's available memory (CPU).
  virtual double free_bytes() const = 0;
  virtual void* stream() = 0;           // cudaStream_t, or nullptr on CPU
  virtual int device_type() const = 0;  // pkb_device_type
  virtual int device_index() const = 0;
  virtual void* nccl_comm(const std::string& group) = 0;
  // How many processes hold a compute context on this rank's GPU (NVML, from the driver), so the
  // judge can see that nothing but its own job's processes run there while it times. UNAVAILABLE
  // where that cannot be known (CPU, no NVML, no permission).
  virtual absl::StatusOr<int> ComputeProcesses() {
    return absl::UnavailableError("no GPU process list on this device");
  }

  // The world communicator and its sub-groups, for references. After PrepareWorld, the groups
  // only.
  virtual absl::StatusOr<Comm*> MakeComm(const std::vector<GroupLayout>& groups) = 0;
  // The world communicator now, before the problem's groups are known (a rank started ahead of
  // its job: pkb-rank --device-early), where making it is slow: NCCL's. Elsewhere nothing (MPI's
  // world exists once MPI has started). Collective over the world.
  virtual absl::Status PrepareWorld() { return absl::OkStatus(); }

  // Captures the work `body` enqueues on stream() into a CUDA graph and returns a function that
  // replays it (then waits for nothing): the reference timed without its host overhead.
  // UNIMPLEMENTED where there are no graphs (CPU; ranks sharing a GPU, whose collectives are
  // host-staged); FAILED_PRECONDITION naming why when the work cannot be captured (a host
  // synchronization, a data-dependent shape). The device is usable afterwards either way.
  virtual absl::StatusOr<std::function<absl::Status()>> CaptureGraph(
      const std::function<absl::Status()>& body) {
    (void)body;
    return absl::UnimplementedError("no CUDA graphs on this device");
  }

  // Runs `body` (work enqueued on the device) and waits for it, with the GPU's activity recorded
  // (profiler.h): the profile pass after the timed window. Where there is nothing to record (CPU)
  // the body runs and the profile's note says why it is empty.
  virtual absl::StatusOr<v1::CallProfile> Profile(const std::function<absl::Status()>& body) {
    PKB_RETURN_IF_ERROR(body());
    PKB_RETURN_IF_ERROR(Synchronize());
    v1::CallProfile none;
    none.set_note("no GPU profile on this device");
    return none;
  }

  // Makes ATen ops of this thread run on stream() until the returned guard is destroyed.
  virtual std::shared_ptr<void> UseStream() = 0;
  virtual absl::Status Synchronize() = 0;  // the whole device, reporting any asynchronous fault
  // The work enqueued on stream() only (while a watch runs, the device is never idle).
  virtual absl::Status SynchronizeStream() { return Synchronize(); }

  // The judge's watch over the GPU (gpu_watch.h) while its host is stopped: StartWatch launches
  // it on a stream of its own and returns once it has started; StopWatch ends it and reads it.
  // Between the two, wait with SynchronizeStream. UNIMPLEMENTED where there is no watch (CPU).
  virtual absl::Status StartWatch() { return absl::UnimplementedError("no GPU watch here"); }
  virtual absl::StatusOr<GpuWatchReading> StopWatch() {
    return absl::UnimplementedError("no GPU watch here");
  }

  // The judge's byte moves (byte_moves.h) staged for one launch on stream(): staging allocates
  // and waits (before any watch); Run() enqueues them, as often as wanted while the memory they
  // name lives. Here, on the host (CPU devices: their memory is the host's).
  class StagedMoves {
   public:
    virtual ~StagedMoves() = default;
    virtual absl::Status Run() = 0;
  };
  virtual absl::StatusOr<std::unique_ptr<StagedMoves>> StageMoves(
      const std::vector<ByteMove>& moves);

  // Iteration timers: Mark(i, 0) before and Mark(i, 1) after iteration i, on the stream, with
  // no host synchronization; ElapsedUs(i) after Synchronize().
  virtual void ResetTimers(int iterations) = 0;
  virtual void Mark(int iteration, int which) = 0;
  virtual double ElapsedUs(int iteration) = 0;

  // Collective allocation of symmetric memory (candidate API).
  virtual int SymmAlloc(size_t bytes, pkb_symm* out, std::string* error) = 0;

  // Memory the judge shares with its candidate host (rank_host.proto). The judge allocates it
  // (a memfd on CPU, to pass along; a CUDA IPC handle on GPUs) and the host maps it.
  struct SharedSegment {
    void* base = nullptr;
    size_t bytes = 0;
    int fd = -1;                  // CPU
    std::string cuda_ipc_handle;  // CUDA
  };
  virtual absl::StatusOr<SharedSegment> AllocShared(size_t bytes) = 0;
  virtual void FreeShared(SharedSegment& segment) = 0;
  // In the host: maps the judge's segment (its fd or handle; `base` is set).
  virtual absl::Status MapShared(SharedSegment& segment) = 0;
  virtual void UnmapShared(SharedSegment& segment) = 0;
};

absl::StatusOr<std::unique_ptr<RankDevice>> MakeCpuRankDevice(const RankIdentity& id);
// Rank and size given by the CPU backend's launcher (mpirun), and its orderly shutdown.
int CpuBackendRank();
int CpuBackendWorld();
void FinalizeCpuBackend();
#ifdef PKB_WITH_CUDA
absl::StatusOr<std::unique_ptr<RankDevice>> MakeCudaRankDevice(const RankIdentity& id);
// Number of CUDA devices visible, or an error saying why none.
absl::StatusOr<int> CudaDeviceCount();
#endif

}  // namespace pkb

#endif  // PKB_WORKER_ENGINE_RANK_DEVICE_H_
