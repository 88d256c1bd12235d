// CPU rank device: tensors in host memory, MPI collectives, a steady clock for timing. Symmetric
// memory on CPU is an ordinary allocation visible to this rank only (CPU candidates are test
// vehicles; they do not share memory across processes).
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

  int SymmAlloc(size_t bytes, pkb_symm* out, std::string* error) override {
    auto& a = allocations_.emplace_back();
    a.data.assign(bytes, 0);
    a.signal.assign(PKB_SIGNAL_CHANNELS * PKB_MAX_RANKS, 0);
    a.peers.assign(id_.world, nullptr);
    a.signal_peers.assign(id_.world, nullptr);
    a.peers[id_.rank] = a.data.data();
    a.signal_peers[id_.rank] = a.signal.data();
    out->local = a.data.data();
    out->peers = a.peers.data();
    out->bytes = bytes;
    out->signal_local = a.signal.data();
    out->signal_peers = a.signal_peers.data();
    out->peers_dev = a.peers.data();
    out->signal_peers_dev = a.signal_peers.data();
    return 0;
  }

 private:
  struct Allocation {
    std::vector<unsigned char> data;
    std::vector<uint32_t> signal;
    std::vector<void*> peers;
    std::vector<uint32_t*> signal_peers;
  };
  RankIdentity id_;
  std::unique_ptr<Comm> comm_;
  std::vector<std::chrono::steady_clock::time_point> marks_;
  std::deque<Allocation> allocations_;
};

}  // namespace

int CpuBackendRank() { return MpiWorldRank(); }
int CpuBackendWorld() { return MpiWorldSize(); }
void FinalizeCpuBackend() { FinalizeMpi(); }

absl::StatusOr<std::unique_ptr<RankDevice>> MakeCpuRankDevice(const RankIdentity& id) {
  return std::unique_ptr<RankDevice>(new CpuRankDevice(id));
}

}  // namespace pkb
