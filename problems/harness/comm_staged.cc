#include "problems/harness/comm_staged.h"

#include "common/status_macros.h"

namespace pkb {
namespace {

// A contiguous host copy of `t` (a fresh buffer even when `t` is on the host); waits for the
// work queued before it on the current stream.
at::Tensor ToHost(const at::Tensor& t) {
  return t.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true).contiguous();
}

// An uninitialized host buffer shaped like `t`.
at::Tensor HostLike(const at::Tensor& t) {
  return at::empty(t.sizes(), t.options().device(at::kCPU));
}

}  // namespace

StagedComm::StagedComm(std::unique_ptr<Comm> host, at::Device device)
    : owned_(std::move(host)), host_(owned_.get()), device_(device) {}

StagedComm::StagedComm(Comm* host, at::Device device) : host_(host), device_(device) {}

absl::Status StagedComm::AllReduce(at::Tensor& t, ReduceOp op) {
  at::Tensor h = ToHost(t);
  PKB_RETURN_IF_ERROR(host_->AllReduce(h, op));
  t.copy_(h);
  return absl::OkStatus();
}

absl::Status StagedComm::AllGatherInto(at::Tensor& out, const at::Tensor& in) {
  at::Tensor h_in = ToHost(in), h_out = HostLike(out);
  PKB_RETURN_IF_ERROR(host_->AllGatherInto(h_out, h_in));
  out.copy_(h_out);
  return absl::OkStatus();
}

absl::Status StagedComm::ReduceScatterInto(at::Tensor& out, const at::Tensor& in, ReduceOp op) {
  at::Tensor h_in = ToHost(in), h_out = HostLike(out);
  PKB_RETURN_IF_ERROR(host_->ReduceScatterInto(h_out, h_in, op));
  out.copy_(h_out);
  return absl::OkStatus();
}

absl::Status StagedComm::Broadcast(at::Tensor& t, int root) {
  at::Tensor h = ToHost(t);
  PKB_RETURN_IF_ERROR(host_->Broadcast(h, root));
  t.copy_(h);
  return absl::OkStatus();
}

absl::Status StagedComm::Reduce(at::Tensor& t, int root, ReduceOp op) {
  at::Tensor h = ToHost(t);
  PKB_RETURN_IF_ERROR(host_->Reduce(h, root, op));
  if (rank() == root) t.copy_(h);  // the others' tensors stay untouched, as NCCL leaves them
  return absl::OkStatus();
}

absl::Status StagedComm::AllToAllSingle(at::Tensor& out, const at::Tensor& in,
                                        const std::vector<int64_t>& out_splits,
                                        const std::vector<int64_t>& in_splits) {
  at::Tensor h_in = ToHost(in), h_out = HostLike(out);
  PKB_RETURN_IF_ERROR(host_->AllToAllSingle(h_out, h_in, out_splits, in_splits));
  out.copy_(h_out);
  return absl::OkStatus();
}

absl::Status StagedComm::Gather(std::vector<at::Tensor>& outs, const at::Tensor& in, int root) {
  std::vector<at::Tensor> h_outs;
  PKB_RETURN_IF_ERROR(host_->Gather(h_outs, ToHost(in), root));
  if (rank() == root) {
    outs.clear();
    for (const auto& h : h_outs) outs.push_back(h.to(device_));
  }
  return absl::OkStatus();
}

absl::Status StagedComm::Scatter(at::Tensor& out, const std::vector<at::Tensor>& ins, int root) {
  std::vector<at::Tensor> h_ins;
  for (const auto& t : ins) h_ins.push_back(ToHost(t));
  at::Tensor h_out = HostLike(out);
  PKB_RETURN_IF_ERROR(host_->Scatter(h_out, h_ins, root));
  out.copy_(h_out);
  return absl::OkStatus();
}

absl::Status StagedComm::BatchP2P(const std::vector<P2POp>& ops) {
  std::vector<P2POp> staged;
  staged.reserve(ops.size());
  for (const auto& op : ops) {
    staged.push_back(
        {op.kind, op.kind == P2POp::kSend ? ToHost(op.tensor) : HostLike(op.tensor), op.peer});
  }
  PKB_RETURN_IF_ERROR(host_->BatchP2P(staged));
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind == P2POp::kRecv) {
      at::Tensor target = ops[i].tensor;  // a handle to the caller's storage
      target.copy_(staged[i].tensor);
    }
  }
  return absl::OkStatus();
}

absl::Status StagedComm::Barrier() {
  // A copy to the host waits for the stream, as NCCL's barrier (an all-reduce) does.
  (void)ToHost(at::zeros({1}, at::TensorOptions().dtype(at::kInt).device(device_)));
  return host_->Barrier();
}

Comm* StagedComm::Group(const std::string& name) {
  auto it = groups_.find(name);
  if (it != groups_.end()) return it->second.get();
  Comm* sub = host_->Group(name);
  if (sub == nullptr) return nullptr;
  return (groups_[name] = std::make_unique<StagedComm>(sub, device_)).get();
}

}  // namespace pkb
