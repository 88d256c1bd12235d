// Collectives for references, over one process group: NCCL on GPU (NcclComm in
// worker/engine/rank_device_cuda.cc), OpenMPI on CPU (comm_mpi.cc, used by the CI tests of every
// reference), and OpenMPI on host copies where GPU ranks share a GPU (comm_staged.h). The operations mirror the
// torch.distributed calls PKB's references make, with the same semantics, so a reference reads
// like its Python original. Tensors must be contiguous; every call is collective over the
// group; errors come back as a Status naming the operation.
//
// Thread-safety: a Comm is used by one thread at a time (the rank's harness thread).
#ifndef PKB_PROBLEMS_HARNESS_COMM_H_
#define PKB_PROBLEMS_HARNESS_COMM_H_

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace pkb {

enum class ReduceOp { kSum, kMax, kMin };

// One point-to-point transfer of a batch (torch.distributed.batch_isend_irecv).
struct P2POp {
  enum Kind { kSend, kRecv } kind;
  at::Tensor tensor;
  int peer;  // group rank
};

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;  // rank inside this group
  virtual int size() const = 0;
  virtual const std::vector<int>& global_ranks() const = 0;  // group rank -> global rank

  // In place, like dist.all_reduce.
  virtual absl::Status AllReduce(at::Tensor& t, ReduceOp op) = 0;
  // out = concatenation along dim 0 of every rank's `in` (dist.all_gather_into_tensor).
  virtual absl::Status AllGatherInto(at::Tensor& out, const at::Tensor& in) = 0;
  // out = block `rank` (along dim 0, size()-way split) of the reduction of every rank's `in`.
  virtual absl::Status ReduceScatterInto(at::Tensor& out, const at::Tensor& in, ReduceOp op) = 0;
  virtual absl::Status Broadcast(at::Tensor& t, int root) = 0;
  // In place; only the root's tensor holds the result (others are left untouched, as NCCL does).
  virtual absl::Status Reduce(at::Tensor& t, int root, ReduceOp op) = 0;
  // dist.all_to_all_single: splits count rows along dim 0; empty splits mean equal blocks.
  virtual absl::Status AllToAllSingle(at::Tensor& out, const at::Tensor& in,
                                      const std::vector<int64_t>& out_splits,
                                      const std::vector<int64_t>& in_splits) = 0;
  // dist.gather: on the root, `outs` receives size() tensors shaped like `in`.
  virtual absl::Status Gather(std::vector<at::Tensor>& outs, const at::Tensor& in, int root) = 0;
  // dist.scatter: the root sends ins[i] to rank i; every rank receives into `out`.
  virtual absl::Status Scatter(at::Tensor& out, const std::vector<at::Tensor>& ins, int root) = 0;
  // dist.batch_isend_irecv followed by waiting on every request.
  virtual absl::Status BatchP2P(const std::vector<P2POp>& ops) = 0;
  virtual absl::Status Barrier() = 0;

  // The communicator of a named sub-group that contains this rank, or nullptr.
  virtual Comm* Group(const std::string& name) = 0;
};

}  // namespace pkb

#endif  // PKB_PROBLEMS_HARNESS_COMM_H_
