// CPU rank device: tensors in host memory, MPI collectives, a steady clock for timing. Symmetric
// memory on CPU is host memory the ranks' processes share (files in the rendezvous folder):
// CPU test candidates exchange data through it as GPU candidates do through theirs.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <deque>

#include "absl/strings/str_cat.h"
#include "problems/harness/comm_mpi.h"
#include "worker/engine/rank_device.h"

namespace pkb {
namespace {

class CpuRankDevice : public RankDevice {
 public:
  explicit CpuRankDevice(RankIdentity id) : id_(std::move(id)) {}

  at::Device device() const override { return at::kCPU; }
  std::string name() const override { return "cpu"; }
  double l2_bytes() const override { return 4.0 * 1024 * 1024; }
  double free_bytes() const override {
    const double avail = static_cast<double>(sysconf(_SC_AVPHYS_PAGES)) * sysconf(_SC_PAGESIZE);
    return avail / std::max(1, id_.world);
  }
  void* stream() override { return nullptr; }
  int device_type() const override { return PKB_CPU; }
  int device_index() const override { return 0; }
  void* nccl_comm(const std::string&) override { return nullptr; }

  absl::StatusOr<Comm*> MakeComm(const std::vector<GroupLayout>& groups) override {
    PKB_ASSIGN_OR_RETURN(comm_, MakeMpiWorld(groups));
    if (comm_->size() != id_.world) {
      return absl::InternalError(absl::StrCat("MPI world has ", comm_->size(),
                                              " processes, the job asked for ", id_.world));
    }
    return comm_.get();
  }

  std::shared_ptr<void> UseStream() override { return nullptr; }
  absl::Status Synchronize() override { return absl::OkStatus(); }

  void ResetTimers(int iterations) override { marks_.assign(iterations * 2, {}); }
  void Mark(int iteration, int which) override {
    marks_[iteration * 2 + which] = std::chrono::steady_clock::now();
  }
  double ElapsedUs(int iteration) override {
    return std::chrono::duration<double, std::micro>(marks_[iteration * 2 + 1] -
                                                     marks_[iteration * 2])
        .count();
  }

  // Symmetric memory in host memory shared by the ranks' processes: each rank's allocation is a
  // file in the rendezvous folder that every rank maps (collective, like the CUDA one).
  int SymmAlloc(size_t bytes, pkb_symm* out, std::string* error) override {
    absl::Status s = SymmAllocImpl(bytes, out);
    if (!s.ok()) *error = std::string(s.message());
    return s.ok() ? 0 : 1;
  }

  absl::StatusOr<SharedSegment> AllocShared(size_t bytes) override {
    SharedSegment s;
    s.bytes = std::max<size_t>(bytes, 1);
    s.fd = memfd_create("pkb-segment", MFD_CLOEXEC);
    if (s.fd < 0) return absl::InternalError("memfd_create failed");
    if (ftruncate(s.fd, static_cast<off_t>(s.bytes)) != 0) {
      close(s.fd);
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot size a segment of ", s.bytes, " bytes"));
    }
    PKB_RETURN_IF_ERROR(MapShared(s));
    return s;
  }
  void FreeShared(SharedSegment& s) override {
    UnmapShared(s);
    if (s.fd >= 0) close(s.fd);
    s.fd = -1;
  }
  absl::Status MapShared(SharedSegment& s) override {
    void* p = mmap(nullptr, s.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s.fd, 0);
    if (p == MAP_FAILED)
      return absl::InternalError(absl::StrCat("cannot map a segment of ", s.bytes, " bytes"));
    s.base = p;
    return absl::OkStatus();
  }
  void UnmapShared(SharedSegment& s) override {
    if (s.base) munmap(s.base, s.bytes);
    s.base = nullptr;
  }

 private:
  struct Allocation {
    std::vector<void*> peers;
    std::vector<uint32_t*> signal_peers;
  };

  std::string SymmPath(int seq, int rank) const {
    return absl::StrCat(id_.rendezvous_dir, "/symm-", seq, "-", rank);
  }

  absl::StatusOr<void*> MapFile(const std::string& path, size_t bytes, bool create) {
    int fd = open(path.c_str(), create ? O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC : O_RDWR | O_CLOEXEC,
                  0600);
    if (fd < 0) return absl::InternalError(absl::StrCat("symm_alloc: cannot open ", path));
    if (create && ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      close(fd);
      return absl::ResourceExhaustedError(absl::StrCat("symm_alloc: cannot size ", path));
    }
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return absl::InternalError(absl::StrCat("symm_alloc: cannot map ", path));
    return p;
  }

  absl::Status SymmAllocImpl(size_t bytes, pkb_symm* out) {
    if (id_.world > PKB_MAX_RANKS) return absl::InvalidArgumentError("world exceeds PKB_MAX_RANKS");
    if (id_.world > 1 && !id_.barrier) {
      return absl::FailedPreconditionError("symm_alloc: no barrier across the ranks here");
    }
    const size_t pad_bytes = sizeof(uint32_t) * PKB_SIGNAL_CHANNELS * PKB_MAX_RANKS;
    const size_t data_bytes = (bytes + 255) / 256 * 256;
    const int seq = symm_seq_++;
    auto& a = allocations_.emplace_back();
    a.peers.assign(id_.world, nullptr);
    a.signal_peers.assign(id_.world, nullptr);
    // Created zeroed; mapped by the others only after every rank has created its own.
    PKB_ASSIGN_OR_RETURN(a.peers[id_.rank],
                         MapFile(SymmPath(seq, id_.rank), data_bytes + pad_bytes, true));
    if (id_.world > 1) PKB_RETURN_IF_ERROR(id_.barrier());
    for (int p = 0; p < id_.world; ++p) {
      if (p == id_.rank) continue;
      PKB_ASSIGN_OR_RETURN(a.peers[p], MapFile(SymmPath(seq, p), data_bytes + pad_bytes, false));
    }
    for (int p = 0; p < id_.world; ++p) {
      a.signal_peers[p] = reinterpret_cast<uint32_t*>(static_cast<char*>(a.peers[p]) + data_bytes);
    }
    out->local = a.peers[id_.rank];
    out->peers = a.peers.data();
    out->bytes = bytes;
    out->signal_local = a.signal_peers[id_.rank];
    out->signal_peers = a.signal_peers.data();
    out->peers_dev = a.peers.data();
    out->signal_peers_dev = a.signal_peers.data();
    return absl::OkStatus();
  }
  RankIdentity id_;
  std::unique_ptr<Comm> comm_;
  std::vector<std::chrono::steady_clock::time_point> marks_;
  std::deque<Allocation> allocations_;
  int symm_seq_ = 0;
};

}  // namespace

int CpuBackendRank() { return MpiWorldRank(); }
int CpuBackendWorld() { return MpiWorldSize(); }
void FinalizeCpuBackend() { FinalizeMpi(); }

absl::StatusOr<std::unique_ptr<RankDevice>> MakeCpuRankDevice(const RankIdentity& id) {
  return std::unique_ptr<RankDevice>(new CpuRankDevice(id));
}

}  // namespace pkb
