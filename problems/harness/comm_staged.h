// A Comm that runs another one on host copies of its tensors: the judges' collectives when rank
// processes share a GPU. NCCL refuses two ranks of one communicator on one GPU ("Duplicate GPU
// detected"), so there the references' collectives go through the CPU backend's OpenMPI: every
// call copies its tensors to fresh host buffers, runs the host collective on them, and copies
// the results back into the caller's tensors, with the same semantics as the Comm interface
// (comm.h). Synchronous: a copy to the host waits for the work queued before it on the current
// stream, and the copies back are queued on that stream.
//
//   std::unique_ptr<Comm> mpi = ...MakeMpiWorld(groups)...;
//   StagedComm world(std::move(mpi), at::Device(at::kCUDA, 0));
//   world.AllReduce(cuda_tensor, ReduceOp::kSum);
//
// It stages every tensor, host tensors too (copied like the others), so the CPU tests exercise
// exactly the path GPU ranks take.
#ifndef PKB_PROBLEMS_HARNESS_COMM_STAGED_H_
#define PKB_PROBLEMS_HARNESS_COMM_STAGED_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "problems/harness/comm.h"

namespace pkb {

class StagedComm : public Comm {
 public:
  // `host` runs the collectives on host tensors; `device` is where the callers' tensors live.
  StagedComm(std::unique_ptr<Comm> host, at::Device device);
  // A view of a sub-group of another StagedComm's host communicator (not owned).
  StagedComm(Comm* host, at::Device device);

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  const std::vector<int>& global_ranks() const override { return host_->global_ranks(); }

  absl::Status AllReduce(at::Tensor& t, ReduceOp op) override;
  absl::Status AllGatherInto(at::Tensor& out, const at::Tensor& in) override;
  absl::Status ReduceScatterInto(at::Tensor& out, const at::Tensor& in, ReduceOp op) override;
  absl::Status Broadcast(at::Tensor& t, int root) override;
  absl::Status Reduce(at::Tensor& t, int root, ReduceOp op) override;
  absl::Status AllToAllSingle(at::Tensor& out, const at::Tensor& in,
                              const std::vector<int64_t>& out_splits,
                              const std::vector<int64_t>& in_splits) override;
  absl::Status Gather(std::vector<at::Tensor>& outs, const at::Tensor& in, int root) override;
  absl::Status Scatter(at::Tensor& out, const std::vector<at::Tensor>& ins, int root) override;
  absl::Status BatchP2P(const std::vector<P2POp>& ops) override;
  // Waits for the work queued on the current stream, then for every rank.
  absl::Status Barrier() override;
  Comm* Group(const std::string& name) override;

 private:
  std::unique_ptr<Comm> owned_;
  Comm* host_;
  at::Device device_;
  std::map<std::string, std::unique_ptr<StagedComm>> groups_;
};

}  // namespace pkb

#endif  // PKB_PROBLEMS_HARNESS_COMM_STAGED_H_
