// CUDA rank device: one GPU per rank process, NCCL communicators (WORLD and the problem's
// sub-groups, split from WORLD), CUDA events per iteration, and symmetric memory through CUDA
// IPC. The ranks meet through a c10d::FileStore in the job's scratch folder. Where ranks share a
// GPU (RankIdentity::share_gpu), the judges' collectives go through host-staged MPI instead and
// there is no NCCL communicator.
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <limits>
#include <map>
#include <torch/csrc/distributed/c10d/FileStore.hpp>

#include "absl/strings/str_cat.h"
#include "worker/engine/profiler.h"
#include "worker/engine/rank_device.h"
#ifdef PKB_WITH_MPI
#include "problems/harness/comm_mpi.h"
#include "problems/harness/comm_staged.h"
#endif

namespace pkb {
namespace {

std::string CudaError(cudaError_t e, const char* what) {
  return absl::StrCat(what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}

#define PKB_CUDA_OR_RETURN(expr)                                                     \
  do {                                                                               \
    cudaError_t pkb_e_ = (expr);                                                     \
    if (pkb_e_ != cudaSuccess) return absl::InternalError(CudaError(pkb_e_, #expr)); \
  } while (0)

#define PKB_NCCL_OR_RETURN(expr)                                                         \
  do {                                                                                   \
    ncclResult_t pkb_r_ = (expr);                                                        \
    if (pkb_r_ != ncclSuccess) {                                                         \
      return absl::InternalError(absl::StrCat(#expr, ": ", ncclGetErrorString(pkb_r_))); \
    }                                                                                    \
  } while (0)

absl::StatusOr<ncclDataType_t> NcclType(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16:
      return ncclBfloat16;
    case at::kHalf:
      return ncclFloat16;
    case at::kFloat:
      return ncclFloat32;
    case at::kDouble:
      return ncclFloat64;
    case at::kLong:
      return ncclInt64;
    case at::kInt:
      return ncclInt32;
    case at::kByte:
    case at::kBool:
    case at::kFloat8_e4m3fn:
    case at::kFloat8_e5m2:
    case at::kChar:
      return ncclUint8;
    default:
      return absl::InvalidArgumentError(absl::StrCat("NCCL has no type for ", c10::toString(t)));
  }
}

ncclRedOp_t NcclOp(ReduceOp op) {
  return op == ReduceOp::kSum ? ncclSum : (op == ReduceOp::kMax ? ncclMax : ncclMin);
}

absl::Status RequireCuda(const at::Tensor& t, const char* op) {
  if (!t.is_cuda() || !t.is_contiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": tensors must be contiguous CUDA tensors"));
  }
  return absl::OkStatus();
}

class NcclComm : public Comm {
 public:
  NcclComm(ncclComm_t comm, std::vector<int> global_ranks, cudaStream_t stream)
      : comm_(comm), global_ranks_(std::move(global_ranks)), stream_(stream) {
    ncclCommUserRank(comm_, &rank_);
    ncclCommCount(comm_, &size_);
  }
  ~NcclComm() override { ncclCommDestroy(comm_); }

  ncclComm_t raw() const { return comm_; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::vector<int>& global_ranks() const override { return global_ranks_; }

  absl::Status AllReduce(at::Tensor& t, ReduceOp op) override {
    PKB_RETURN_IF_ERROR(RequireCuda(t, "all_reduce"));
    PKB_ASSIGN_OR_RETURN(auto type, NcclType(t.scalar_type()));
    PKB_NCCL_OR_RETURN(
        ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), type, NcclOp(op), comm_, stream_));
    return absl::OkStatus();
  }
  absl::Status AllGatherInto(at::Tensor& out, const at::Tensor& in) override {
    PKB_RETURN_IF_ERROR(RequireCuda(out, "all_gather_into_tensor"));
    PKB_RETURN_IF_ERROR(RequireCuda(in, "all_gather_into_tensor"));
    PKB_NCCL_OR_RETURN(
        ncclAllGather(in.data_ptr(), out.data_ptr(), in.nbytes(), ncclUint8, comm_, stream_));
    return absl::OkStatus();
  }
  absl::Status ReduceScatterInto(at::Tensor& out, const at::Tensor& in, ReduceOp op) override {
    PKB_RETURN_IF_ERROR(RequireCuda(out, "reduce_scatter_tensor"));
    PKB_RETURN_IF_ERROR(RequireCuda(in, "reduce_scatter_tensor"));
    PKB_ASSIGN_OR_RETURN(auto type, NcclType(in.scalar_type()));
    PKB_NCCL_OR_RETURN(ncclReduceScatter(in.data_ptr(), out.data_ptr(), out.numel(), type,
                                         NcclOp(op), comm_, stream_));
    return absl::OkStatus();
  }
  absl::Status Broadcast(at::Tensor& t, int root) override {
    PKB_RETURN_IF_ERROR(RequireCuda(t, "broadcast"));
    PKB_NCCL_OR_RETURN(
        ncclBroadcast(t.data_ptr(), t.data_ptr(), t.nbytes(), ncclUint8, root, comm_, stream_));
    return absl::OkStatus();
  }
  absl::Status Reduce(at::Tensor& t, int root, ReduceOp op) override {
    PKB_RETURN_IF_ERROR(RequireCuda(t, "reduce"));
    PKB_ASSIGN_OR_RETURN(auto type, NcclType(t.scalar_type()));
    PKB_NCCL_OR_RETURN(
        ncclReduce(t.data_ptr(), t.data_ptr(), t.numel(), type, NcclOp(op), root, comm_, stream_));
    return absl::OkStatus();
  }
  absl::Status AllToAllSingle(at::Tensor& out, const at::Tensor& in,
                              const std::vector<int64_t>& out_splits,
                              const std::vector<int64_t>& in_splits) override {
    PKB_RETURN_IF_ERROR(RequireCuda(out, "all_to_all_single"));
    PKB_RETURN_IF_ERROR(RequireCuda(in, "all_to_all_single"));
    auto offsets = [&](const at::Tensor& t, const std::vector<int64_t>& splits,
                       std::vector<size_t>* off, std::vector<size_t>* len) -> absl::Status {
      int64_t rows = t.dim() == 0 ? 1 : t.size(0);
      size_t row_bytes = rows == 0 ? 0 : t.nbytes() / rows;
      off->assign(size_, 0);
      len->assign(size_, 0);
      for (int i = 0; i < size_; ++i) {
        int64_t r = splits.empty() ? rows / size_ : splits[i];
        (*len)[i] = r * row_bytes;
        if (i > 0) (*off)[i] = (*off)[i - 1] + (*len)[i - 1];
      }
      if (splits.empty() && rows % size_ != 0) {
        return absl::InvalidArgumentError("all_to_all_single: dim 0 not divisible by world");
      }
      if (!splits.empty() && static_cast<int>(splits.size()) != size_) {
        return absl::InvalidArgumentError("all_to_all_single: splits must have world_size entries");
      }
      return absl::OkStatus();
    };
    std::vector<size_t> so, sl, ro, rl;
    PKB_RETURN_IF_ERROR(offsets(in, in_splits, &so, &sl));
    PKB_RETURN_IF_ERROR(offsets(out, out_splits, &ro, &rl));
    auto* src = static_cast<char*>(in.data_ptr());
    auto* dst = static_cast<char*>(out.data_ptr());
    PKB_NCCL_OR_RETURN(ncclGroupStart());
    for (int p = 0; p < size_; ++p) {
      if (sl[p]) PKB_NCCL_OR_RETURN(ncclSend(src + so[p], sl[p], ncclUint8, p, comm_, stream_));
      if (rl[p]) PKB_NCCL_OR_RETURN(ncclRecv(dst + ro[p], rl[p], ncclUint8, p, comm_, stream_));
    }
    PKB_NCCL_OR_RETURN(ncclGroupEnd());
    return absl::OkStatus();
  }
  absl::Status Gather(std::vector<at::Tensor>& outs, const at::Tensor& in, int root) override {
    PKB_RETURN_IF_ERROR(RequireCuda(in, "gather"));
    if (rank_ == root) {
      outs.clear();
      for (int i = 0; i < size_; ++i) outs.push_back(at::empty_like(in));
    }
    PKB_NCCL_OR_RETURN(ncclGroupStart());
    if (rank_ == root) {
      for (int p = 0; p < size_; ++p) {
        if (p == root) {
          PKB_CUDA_OR_RETURN(cudaMemcpyAsync(outs[p].data_ptr(), in.data_ptr(), in.nbytes(),
                                             cudaMemcpyDeviceToDevice, stream_));
        } else {
          PKB_NCCL_OR_RETURN(
              ncclRecv(outs[p].data_ptr(), in.nbytes(), ncclUint8, p, comm_, stream_));
        }
      }
    } else {
      PKB_NCCL_OR_RETURN(ncclSend(in.data_ptr(), in.nbytes(), ncclUint8, root, comm_, stream_));
    }
    PKB_NCCL_OR_RETURN(ncclGroupEnd());
    return absl::OkStatus();
  }
  absl::Status Scatter(at::Tensor& out, const std::vector<at::Tensor>& ins, int root) override {
    PKB_RETURN_IF_ERROR(RequireCuda(out, "scatter"));
    PKB_NCCL_OR_RETURN(ncclGroupStart());
    if (rank_ == root) {
      for (int p = 0; p < size_; ++p) {
        at::Tensor src = ins[p].contiguous();
        if (p == root) {
          PKB_CUDA_OR_RETURN(cudaMemcpyAsync(out.data_ptr(), src.data_ptr(), out.nbytes(),
                                             cudaMemcpyDeviceToDevice, stream_));
        } else {
          PKB_NCCL_OR_RETURN(ncclSend(src.data_ptr(), out.nbytes(), ncclUint8, p, comm_, stream_));
        }
      }
    } else {
      PKB_NCCL_OR_RETURN(ncclRecv(out.data_ptr(), out.nbytes(), ncclUint8, root, comm_, stream_));
    }
    PKB_NCCL_OR_RETURN(ncclGroupEnd());
    return absl::OkStatus();
  }
  absl::Status BatchP2P(const std::vector<P2POp>& ops) override {
    PKB_NCCL_OR_RETURN(ncclGroupStart());
    for (const auto& op : ops) {
      PKB_RETURN_IF_ERROR(RequireCuda(op.tensor, "batch_isend_irecv"));
      if (op.kind == P2POp::kSend) {
        PKB_NCCL_OR_RETURN(
            ncclSend(op.tensor.data_ptr(), op.tensor.nbytes(), ncclUint8, op.peer, comm_, stream_));
      } else {
        PKB_NCCL_OR_RETURN(
            ncclRecv(op.tensor.data_ptr(), op.tensor.nbytes(), ncclUint8, op.peer, comm_, stream_));
      }
    }
    PKB_NCCL_OR_RETURN(ncclGroupEnd());
    return absl::OkStatus();
  }
  absl::Status Barrier() override {
    // Its value is never read: no fill, which would run on whatever stream is current.
    at::Tensor one = at::empty({1}, at::TensorOptions().dtype(at::kInt).device(at::kCUDA));
    PKB_RETURN_IF_ERROR(AllReduce(one, ReduceOp::kSum));
    PKB_CUDA_OR_RETURN(cudaStreamSynchronize(stream_));
    return absl::OkStatus();
  }
  Comm* Group(const std::string& name) override {
    auto it = groups_.find(name);
    return it == groups_.end() ? nullptr : it->second.get();
  }
  void AddGroup(const std::string& name, std::unique_ptr<NcclComm> c) {
    groups_[name] = std::move(c);
  }
  NcclComm* GroupImpl(const std::string& name) {
    auto it = groups_.find(name);
    return it == groups_.end() ? nullptr : it->second.get();
  }

 private:
  ncclComm_t comm_;
  std::vector<int> global_ranks_;
  cudaStream_t stream_;
  int rank_ = 0, size_ = 1;
  std::map<std::string, std::unique_ptr<NcclComm>> groups_;
};

// Byte moves staged on the device (RankDevice::StageMoves): their list in device memory, run by
// one launch of the byte moves' kernel on the judge's stream.
class CudaMoves : public RankDevice::StagedMoves {
 public:
  CudaMoves(cudaStream_t stream, at::Tensor list, int count)
      : stream_(stream), list_(std::move(list)), count_(count) {}
  absl::Status Run() override {
    if (count_ == 0) return absl::OkStatus();
    PKB_CUDA_OR_RETURN(static_cast<cudaError_t>(
        LaunchByteMoves(stream_, static_cast<const PackedMove*>(list_.data_ptr()), count_)));
    return absl::OkStatus();
  }

 private:
  cudaStream_t stream_;
  at::Tensor list_;
  int count_;
};

class CudaRankDevice : public RankDevice {
 public:
  explicit CudaRankDevice(RankIdentity id) : id_(std::move(id)) {}

  absl::Status Init() {
    int count = 0;
    PKB_CUDA_OR_RETURN(cudaGetDeviceCount(&count));
    if (count == 0) return absl::FailedPreconditionError("no CUDA device visible");
    index_ = id_.rank % count;
    PKB_CUDA_OR_RETURN(cudaSetDevice(index_));
    cudaDeviceProp prop;
    PKB_CUDA_OR_RETURN(cudaGetDeviceProperties(&prop, index_));
    name_ = prop.name;
    l2_ = prop.l2CacheSize;
    PKB_CUDA_OR_RETURN(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    store_ = c10::make_intrusive<c10d::FileStore>(id_.rendezvous_dir + "/store", id_.world);
    store_->setTimeout(std::chrono::seconds(120));
    return absl::OkStatus();
  }

  at::Device device() const override { return at::Device(at::kCUDA, index_); }
  std::string name() const override { return name_; }
  double l2_bytes() const override { return l2_; }
  double free_bytes() const override {
    size_t free = 0, total = 0;
    return cudaMemGetInfo(&free, &total) == cudaSuccess ? static_cast<double>(free) : 0;
  }
  absl::StatusOr<int> ComputeProcesses() override {
    // NVML is part of the driver: loaded at run time, so nothing is needed to build.
    using InitFn = int (*)();
    using ByPciFn = int (*)(const char*, void**);
    using ProcsFn = int (*)(void*, unsigned int*, void*);
    static void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return absl::UnavailableError("NVML (libnvidia-ml.so.1) is not loadable");
    static auto init = reinterpret_cast<InitFn>(dlsym(lib, "nvmlInit_v2"));
    static auto by_pci = reinterpret_cast<ByPciFn>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    static auto procs =
        reinterpret_cast<ProcsFn>(dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v3"));
    if (!init || !by_pci || !procs) return absl::UnavailableError("NVML lacks the calls needed");
    static const int init_rc = init();
    if (init_rc != 0) return absl::UnavailableError(absl::StrCat("nvmlInit failed: ", init_rc));
    char bus[64] = {0};
    PKB_CUDA_OR_RETURN(cudaDeviceGetPCIBusId(bus, sizeof(bus), index_));
    void* handle = nullptr;
    if (int rc = by_pci(bus, &handle); rc != 0)
      return absl::UnavailableError(absl::StrCat("NVML has no device ", bus, ": ", rc));
    // With no room for the list, NVML says how many there are (NVML_ERROR_INSUFFICIENT_SIZE).
    unsigned int count = 0;
    const int rc = procs(handle, &count, nullptr);
    constexpr int kNvmlSuccess = 0, kNvmlInsufficientSize = 7;
    if (rc == kNvmlSuccess) return 0;
    if (rc == kNvmlInsufficientSize) return static_cast<int>(count);
    return absl::UnavailableError(absl::StrCat("NVML cannot list the GPU's processes: ", rc));
  }
  void* stream() override { return stream_; }
  int device_type() const override { return PKB_CUDA; }
  int device_index() const override { return index_; }
  void* nccl_comm(const std::string& group) override {
    if (!world_) return nullptr;
    if (group == "world") return world_->raw();
    NcclComm* g = world_->GroupImpl(group);
    return g ? g->raw() : nullptr;
  }

  absl::Status PrepareWorld() override {
    if (id_.share_gpu || world_) return absl::OkStatus();
    ncclUniqueId uid;
    if (id_.rank == 0) {
      PKB_NCCL_OR_RETURN(ncclGetUniqueId(&uid));
      std::vector<uint8_t> bytes(reinterpret_cast<uint8_t*>(&uid),
                                 reinterpret_cast<uint8_t*>(&uid) + sizeof uid);
      store_->set("nccl_uid", bytes);
    } else {
      std::vector<uint8_t> bytes = store_->get("nccl_uid");
      std::memcpy(&uid, bytes.data(), sizeof uid);
    }
    ncclComm_t world;
    PKB_NCCL_OR_RETURN(ncclCommInitRank(&world, id_.world, uid, id_.rank));
    std::vector<int> all(id_.world);
    for (int i = 0; i < id_.world; ++i) all[i] = i;
    world_ = std::make_unique<NcclComm>(world, all, stream_);
    // One collective now: NCCL loads its kernels and connects the peers at the first one, which
    // would otherwise fall in the job's first trial.
    return world_->Barrier();
  }

  absl::StatusOr<Comm*> MakeComm(const std::vector<GroupLayout>& groups) override {
    if (id_.share_gpu) return MakeStagedComm(groups);
    PKB_RETURN_IF_ERROR(PrepareWorld());
    ncclComm_t world = world_->raw();
    for (const auto& layout : groups) {
      int color = NCCL_SPLIT_NOCOLOR, key = 0;
      std::vector<int> members;
      for (size_t c = 0; c < layout.partition.size(); ++c) {
        for (size_t k = 0; k < layout.partition[c].size(); ++k) {
          if (layout.partition[c][k] == id_.rank) {
            color = static_cast<int>(c);
            key = static_cast<int>(k);
            members = layout.partition[c];
          }
        }
      }
      ncclComm_t sub;
      PKB_NCCL_OR_RETURN(ncclCommSplit(world, color, key, &sub, nullptr));
      if (color != NCCL_SPLIT_NOCOLOR) {
        world_->AddGroup(layout.name, std::make_unique<NcclComm>(sub, members, stream_));
      }
    }
    return world_.get();
  }

  std::shared_ptr<void> UseStream() override {
    auto ext = c10::cuda::getStreamFromExternal(stream_, index_);
    return std::make_shared<c10::cuda::CUDAStreamGuard>(ext);
  }

  absl::StatusOr<std::function<absl::Status()>> CaptureGraph(
      const std::function<absl::Status()>& body) override {
    if (id_.share_gpu) return absl::UnimplementedError("ranks share the GPU: no CUDA graphs");
    PKB_CUDA_OR_RETURN(cudaStreamSynchronize(stream_));
    auto graph = std::make_shared<at::cuda::CUDAGraph>();
    std::string failure;
    try {
      // Thread-local: a CUDA call of another thread of this process cannot spoil the capture.
      graph->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
      absl::Status captured = body();
      if (!captured.ok()) failure = std::string(captured.message());
      graph->capture_end();
    } catch (const std::exception& e) {
      if (failure.empty()) failure = e.what();
    }
    if (!failure.empty()) {
      // A capture the failure left open is ended and dropped, and the error cleared.
      cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
      if (cudaStreamIsCapturing(stream_, &status) == cudaSuccess &&
          status != cudaStreamCaptureStatusNone) {
        cudaGraph_t dropped = nullptr;
        cudaStreamEndCapture(stream_, &dropped);
        if (dropped) cudaGraphDestroy(dropped);
      }
      cudaGetLastError();
      graph.reset();
      const std::string first_line = failure.substr(0, failure.find('\n'));
      return absl::FailedPreconditionError(
          absl::StrCat("the reference cannot be captured in a CUDA graph: ", first_line));
    }
    return std::function<absl::Status()>([graph]() -> absl::Status {
      try {
        graph->replay();
      } catch (const std::exception& e) {
        return absl::InternalError(absl::StrCat("CUDA graph replay: ", e.what()));
      }
      return absl::OkStatus();
    });
  }

  absl::StatusOr<v1::CallProfile> Profile(const std::function<absl::Status()>& body) override {
    return ProfileCall(body, [this] { return Synchronize(); });
  }

  absl::Status Synchronize() override {
    // A watch still running (an error path left it) is ended first: the device would not be
    // idle until it ended by itself.
    EndWatch();
    PKB_CUDA_OR_RETURN(cudaDeviceSynchronize());
    PKB_CUDA_OR_RETURN(cudaGetLastError());
    return absl::OkStatus();
  }
  absl::Status SynchronizeStream() override {
    PKB_CUDA_OR_RETURN(cudaStreamSynchronize(stream_));
    PKB_CUDA_OR_RETURN(cudaGetLastError());
    return absl::OkStatus();
  }

  absl::Status StartWatch() override {
    if (watch_slots_ == nullptr) {
      void* slots = nullptr;
      PKB_CUDA_OR_RETURN(cudaHostAlloc(&slots, sizeof(GpuWatchSlots), cudaHostAllocMapped));
      watch_slots_ = static_cast<GpuWatchSlots*>(slots);
      void* on_device = nullptr;
      PKB_CUDA_OR_RETURN(cudaHostGetDevicePointer(&on_device, slots, 0));
      watch_device_ = static_cast<GpuWatchSlots*>(on_device);
      // Its own stream, at the highest priority: the judge's work on stream_ runs beside it.
      int least = 0, greatest = 0;
      PKB_CUDA_OR_RETURN(cudaDeviceGetStreamPriorityRange(&least, &greatest));
      PKB_CUDA_OR_RETURN(
          cudaStreamCreateWithPriority(&watch_stream_, cudaStreamNonBlocking, greatest));
      // Its code loaded and one launch made on its stream, unmeasured: a first launch pays for
      // both (about 0.5 ms on a busy H100), which is no start's to count.
      PKB_CUDA_OR_RETURN(static_cast<cudaError_t>(LoadGpuWatch()));
      watch_slots_->stop = 1;
      PKB_CUDA_OR_RETURN(static_cast<cudaError_t>(LaunchGpuWatch(watch_stream_, watch_device_, 0)));
      PKB_CUDA_OR_RETURN(cudaStreamSynchronize(watch_stream_));
    }
    volatile GpuWatchSlots* s = watch_slots_;
    s->started = 0;
    s->stop = 0;
    s->expired = 0;
    std::atomic_thread_fence(std::memory_order_seq_cst);
    // A judge that never stops it (a bug) cannot hang the device: it ends by itself.
    constexpr unsigned long long kLongestWatchNs = 60ull * 1000 * 1000 * 1000;
    // The start on this thread's CPU clock: it spins from the launch to the first reading, so
    // time the CPU took it away for is left out (nothing of a stopped submission's does that).
    auto cpu_us = [] {
      timespec t;
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
      return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
    };
    const double c0 = cpu_us();
    PKB_CUDA_OR_RETURN(
        static_cast<cudaError_t>(LaunchGpuWatch(watch_stream_, watch_device_, kLongestWatchNs)));
    watch_running_ = true;
    // Microseconds, unless another context holds the GPU; given up on after 10 s (the reading
    // then says so).
    using Clock = std::chrono::steady_clock;
    const auto give_up = Clock::now() + std::chrono::seconds(10);
    while (s->started == 0 && Clock::now() < give_up) {
    }
    watch_start_us_ = cpu_us() - c0;
    return absl::OkStatus();
  }
  absl::StatusOr<GpuWatchReading> StopWatch() override {
    if (watch_slots_ == nullptr) return absl::FailedPreconditionError("no watch started");
    EndWatch();
    PKB_CUDA_OR_RETURN(cudaStreamSynchronize(watch_stream_));
    volatile GpuWatchSlots* s = watch_slots_;
    GpuWatchReading r;
    r.start_us = watch_start_us_;
    r.ran_us = static_cast<double>(s->last - s->first) / 1e3;
    r.longest_gap_us = static_cast<double>(s->longest_gap) / 1e3;
    r.gap_sum_us = static_cast<double>(s->gap_sum) / 1e3;
    r.expired = s->expired != 0;
    return r;
  }

  absl::StatusOr<std::unique_ptr<StagedMoves>> StageMoves(
      const std::vector<ByteMove>& moves) override {
    PKB_ASSIGN_OR_RETURN(std::vector<PackedMove> packed, PackMoves(moves));
    if (packed.size() > static_cast<size_t>(std::numeric_limits<int>::max()))
      return absl::InvalidArgumentError(absl::StrCat(packed.size(), " byte moves in one launch"));
    if (!moves_loaded_) {
      PKB_CUDA_OR_RETURN(static_cast<cudaError_t>(LoadByteMoves()));
      moves_loaded_ = true;
    }
    const size_t bytes = packed.size() * sizeof(PackedMove);
    at::Tensor list = at::empty({static_cast<int64_t>(std::max<size_t>(bytes, 1))},
                                at::TensorOptions().dtype(at::kByte).device(device()));
    if (bytes > 0) {
      PKB_CUDA_OR_RETURN(
          cudaMemcpyAsync(list.data_ptr(), packed.data(), bytes, cudaMemcpyHostToDevice, stream_));
      PKB_CUDA_OR_RETURN(cudaStreamSynchronize(stream_));
    }
    return std::make_unique<CudaMoves>(stream_, std::move(list), static_cast<int>(packed.size()));
  }

  void ResetTimers(int iterations) override {
    while (static_cast<int>(events_.size()) < iterations * 2) {
      cudaEvent_t e;
      cudaEventCreate(&e);
      events_.push_back(e);
    }
  }
  void Mark(int iteration, int which) override {
    cudaEventRecord(events_[iteration * 2 + which], stream_);
  }
  double ElapsedUs(int iteration) override {
    float ms = 0;
    cudaEventElapsedTime(&ms, events_[iteration * 2], events_[iteration * 2 + 1]);
    return ms * 1000.0;
  }

  int SymmAlloc(size_t bytes, pkb_symm* out, std::string* error) override {
    absl::Status s = SymmAllocImpl(bytes, out);
    if (!s.ok()) *error = std::string(s.message());
    return s.ok() ? 0 : 1;
  }

  absl::StatusOr<SharedSegment> AllocShared(size_t bytes) override {
    SharedSegment s;
    s.bytes = std::max<size_t>(bytes, 1);
    PKB_CUDA_OR_RETURN(cudaMalloc(&s.base, s.bytes));
    cudaIpcMemHandle_t handle;
    cudaError_t e = cudaIpcGetMemHandle(&handle, s.base);
    if (e != cudaSuccess) {
      cudaFree(s.base);
      return absl::InternalError(CudaError(e, "cudaIpcGetMemHandle"));
    }
    s.cuda_ipc_handle.assign(reinterpret_cast<const char*>(&handle), sizeof handle);
    return s;
  }
  void FreeShared(SharedSegment& s) override {
    EndWatch();  // cudaFree waits for the device
    if (s.base) cudaFree(s.base);
    s.base = nullptr;
  }
  absl::Status MapShared(SharedSegment& s) override {
    cudaIpcMemHandle_t handle;
    if (s.cuda_ipc_handle.size() != sizeof handle) {
      return absl::InvalidArgumentError("a segment without a CUDA IPC handle");
    }
    std::memcpy(&handle, s.cuda_ipc_handle.data(), sizeof handle);
    PKB_CUDA_OR_RETURN(cudaIpcOpenMemHandle(&s.base, handle, cudaIpcMemLazyEnablePeerAccess));
    return absl::OkStatus();
  }
  void UnmapShared(SharedSegment& s) override {
    if (s.base) cudaIpcCloseMemHandle(s.base);
    s.base = nullptr;
  }

 private:
  // Tells a running watch to end (it does so within microseconds): the device is then idle for
  // whatever waits for it.
  void EndWatch() {
    if (!watch_running_) return;
    static_cast<volatile GpuWatchSlots*>(watch_slots_)->stop = 1;
    std::atomic_thread_fence(std::memory_order_seq_cst);
    watch_running_ = false;
  }

  // The judges' collectives where ranks share a GPU: MPI (the launcher is mpirun) on host copies.
  absl::StatusOr<Comm*> MakeStagedComm(const std::vector<GroupLayout>& groups) {
#ifdef PKB_WITH_MPI
    PKB_ASSIGN_OR_RETURN(std::unique_ptr<Comm> mpi, MakeMpiWorld(groups));
    if (mpi->size() != id_.world || mpi->rank() != id_.rank) {
      return absl::InternalError(absl::StrCat("MPI world is rank ", mpi->rank(), " of ",
                                              mpi->size(), ", expected ", id_.rank, " of ",
                                              id_.world));
    }
    staged_ = std::make_unique<StagedComm>(std::move(mpi), device());
    return staged_.get();
#else
    (void)groups;
    return absl::FailedPreconditionError(
        "ranks that share a GPU need the MPI backend, and this pkb-rank was built without it");
#endif
  }

  struct Allocation {
    std::vector<void*> peers;
    std::vector<uint32_t*> signal_peers;
    void** peers_dev = nullptr;
    uint32_t** signal_peers_dev = nullptr;
  };

  absl::Status SymmAllocImpl(size_t bytes, pkb_symm* out) {
    const size_t pad_bytes = sizeof(uint32_t) * PKB_SIGNAL_CHANNELS * PKB_MAX_RANKS;
    if (id_.world > PKB_MAX_RANKS) return absl::InvalidArgumentError("world exceeds PKB_MAX_RANKS");
    size_t data_bytes = (bytes + 255) / 256 * 256;
    char* base = nullptr;
    PKB_CUDA_OR_RETURN(cudaMalloc(&base, data_bytes + pad_bytes));
    PKB_CUDA_OR_RETURN(cudaMemset(base, 0, data_bytes + pad_bytes));
    PKB_CUDA_OR_RETURN(cudaDeviceSynchronize());
    int seq = symm_seq_++;
    auto& a = allocations_.emplace_back();
    a.peers.assign(id_.world, nullptr);
    a.signal_peers.assign(id_.world, nullptr);
    if (id_.world > 1) {
      cudaIpcMemHandle_t handle;
      PKB_CUDA_OR_RETURN(cudaIpcGetMemHandle(&handle, base));
      std::vector<uint8_t> bytes_out(reinterpret_cast<uint8_t*>(&handle),
                                     reinterpret_cast<uint8_t*>(&handle) + sizeof handle);
      store_->set(absl::StrCat("symm/", seq, "/", id_.rank), bytes_out);
      for (int p = 0; p < id_.world; ++p) {
        if (p == id_.rank) continue;
        std::vector<uint8_t> in = store_->get(absl::StrCat("symm/", seq, "/", p));
        cudaIpcMemHandle_t peer;
        std::memcpy(&peer, in.data(), sizeof peer);
        void* mapped = nullptr;
        PKB_CUDA_OR_RETURN(cudaIpcOpenMemHandle(&mapped, peer, cudaIpcMemLazyEnablePeerAccess));
        a.peers[p] = mapped;
      }
    }
    a.peers[id_.rank] = base;
    for (int p = 0; p < id_.world; ++p) {
      a.signal_peers[p] = reinterpret_cast<uint32_t*>(static_cast<char*>(a.peers[p]) + data_bytes);
    }
    PKB_CUDA_OR_RETURN(cudaMalloc(&a.peers_dev, sizeof(void*) * id_.world));
    PKB_CUDA_OR_RETURN(cudaMalloc(&a.signal_peers_dev, sizeof(uint32_t*) * id_.world));
    PKB_CUDA_OR_RETURN(
        cudaMemcpy(a.peers_dev, a.peers.data(), sizeof(void*) * id_.world, cudaMemcpyHostToDevice));
    PKB_CUDA_OR_RETURN(cudaMemcpy(a.signal_peers_dev, a.signal_peers.data(),
                                  sizeof(uint32_t*) * id_.world, cudaMemcpyHostToDevice));
    // Every rank has zeroed its pad before anyone signals into it.
    store_->set(absl::StrCat("symm/", seq, "/ready/", id_.rank), std::vector<uint8_t>{1});
    for (int p = 0; p < id_.world; ++p) store_->get(absl::StrCat("symm/", seq, "/ready/", p));
    out->local = base;
    out->peers = a.peers.data();
    out->bytes = bytes;
    out->signal_local = a.signal_peers[id_.rank];
    out->signal_peers = a.signal_peers.data();
    out->peers_dev = a.peers_dev;
    out->signal_peers_dev = a.signal_peers_dev;
    return absl::OkStatus();
  }

  RankIdentity id_;
  int index_ = 0;
  std::string name_;
  double l2_ = 0;
  cudaStream_t stream_ = nullptr;
  c10::intrusive_ptr<c10d::FileStore> store_;
  std::unique_ptr<NcclComm> world_;
  std::unique_ptr<Comm> staged_;
  std::vector<cudaEvent_t> events_;
  GpuWatchSlots* watch_slots_ = nullptr;   // StartWatch: mapped host memory (never freed)
  GpuWatchSlots* watch_device_ = nullptr;  // its address on the device
  cudaStream_t watch_stream_ = nullptr;
  double watch_start_us_ = 0;
  bool watch_running_ = false;  // started and not yet stopped
  bool moves_loaded_ = false;   // the byte moves' kernel (LoadByteMoves)
  std::deque<Allocation> allocations_;
  int symm_seq_ = 0;
};

}  // namespace

absl::StatusOr<int> CudaDeviceCount() {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return absl::FailedPreconditionError(CudaError(e, "cudaGetDeviceCount"));
  return count;
}

absl::StatusOr<std::unique_ptr<RankDevice>> MakeCudaRankDevice(const RankIdentity& id) {
  auto d = std::make_unique<CudaRankDevice>(id);
  PKB_RETURN_IF_ERROR(d->Init());
  return std::unique_ptr<RankDevice>(std::move(d));
}

}  // namespace pkb
