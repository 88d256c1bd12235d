#include "problems/harness/comm_mpi.h"

#include <mpi.h>

#include <cstdlib>
#include <map>

#include "absl/strings/str_cat.h"
#include "c10/util/BFloat16.h"
#include "c10/util/Half.h"

namespace pkb {
namespace {

template <typename T, int kOp>
void Reduce16(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<T*>(in);
  auto* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) {
    float x = static_cast<float>(a[i]), y = static_cast<float>(b[i]);
    float r = kOp == 0 ? x + y : (kOp == 1 ? std::max(x, y) : std::min(x, y));
    b[i] = static_cast<T>(r);  // round after every pairwise step
  }
}

struct MpiOps {
  MPI_Op bf16[3];
  MPI_Op f16[3];
};

MpiOps& Ops() {
  static MpiOps* ops = [] {
    auto* o = new MpiOps;
    MPI_Op_create(&Reduce16<c10::BFloat16, 0>, 1, &o->bf16[0]);
    MPI_Op_create(&Reduce16<c10::BFloat16, 1>, 1, &o->bf16[1]);
    MPI_Op_create(&Reduce16<c10::BFloat16, 2>, 1, &o->bf16[2]);
    MPI_Op_create(&Reduce16<c10::Half, 0>, 1, &o->f16[0]);
    MPI_Op_create(&Reduce16<c10::Half, 1>, 1, &o->f16[1]);
    MPI_Op_create(&Reduce16<c10::Half, 2>, 1, &o->f16[2]);
    return o;
  }();
  return *ops;
}

void EnsureInit() {
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    std::atexit([] {
      int fin = 0;
      MPI_Finalized(&fin);
      if (!fin) MPI_Finalize();
    });
  }
}

absl::Status Check(int rc, const char* op) {
  if (rc == MPI_SUCCESS) return absl::OkStatus();
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return absl::InternalError(absl::StrCat("MPI ", op, " failed: ", std::string(msg, len)));
}

// Element datatype and reduction for a tensor, or an error for unsupported combinations.
absl::Status TypeAndOp(const at::Tensor& t, ReduceOp op, MPI_Datatype* type, MPI_Op* mop) {
  int k = static_cast<int>(op);
  switch (t.scalar_type()) {
    case at::kBFloat16:
      *type = MPI_UINT16_T;
      *mop = Ops().bf16[k];
      return absl::OkStatus();
    case at::kHalf:
      *type = MPI_UINT16_T;
      *mop = Ops().f16[k];
      return absl::OkStatus();
    case at::kFloat:
      *type = MPI_FLOAT;
      break;
    case at::kDouble:
      *type = MPI_DOUBLE;
      break;
    case at::kLong:
      *type = MPI_INT64_T;
      break;
    case at::kInt:
      *type = MPI_INT32_T;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("MPI reduction of ", c10::toString(t.scalar_type()), " is not supported"));
  }
  *mop = op == ReduceOp::kSum ? MPI_SUM : (op == ReduceOp::kMax ? MPI_MAX : MPI_MIN);
  return absl::OkStatus();
}

#define PKB_MPI_REQUIRE(t, op)                     \
  do {                                             \
    auto pkb_s_ = RequireCpuContiguous((t), (op)); \
    if (!pkb_s_.ok()) return pkb_s_;               \
  } while (0)

absl::Status RequireCpuContiguous(const at::Tensor& t, const char* op) {
  if (!t.is_cpu() || !t.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": tensors must be contiguous CPU tensors"));
  }
  return absl::OkStatus();
}

class MpiComm : public Comm {
 public:
  MpiComm(MPI_Comm comm, std::vector<int> global_ranks)
      : comm_(comm), global_ranks_(std::move(global_ranks)) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::vector<int>& global_ranks() const override { return global_ranks_; }

  absl::Status AllReduce(at::Tensor& t, ReduceOp op) override {
    PKB_MPI_REQUIRE(t, "all_reduce");
    MPI_Datatype type;
    MPI_Op mop;
    auto s = TypeAndOp(t, op, &type, &mop);
    if (!s.ok()) return s;
    return Check(
        MPI_Allreduce(MPI_IN_PLACE, t.data_ptr(), static_cast<int>(t.numel()), type, mop, comm_),
        "all_reduce");
  }

  absl::Status AllGatherInto(at::Tensor& out, const at::Tensor& in) override {
    PKB_MPI_REQUIRE(out, "all_gather_into_tensor");
    PKB_MPI_REQUIRE(in, "all_gather_into_tensor");
    if (out.nbytes() != in.nbytes() * size_) {
      return absl::InvalidArgumentError("all_gather_into_tensor: output is not world_size x input");
    }
    return Check(MPI_Allgather(in.data_ptr(), static_cast<int>(in.nbytes()), MPI_BYTE,
                               out.data_ptr(), static_cast<int>(in.nbytes()), MPI_BYTE, comm_),
                 "all_gather");
  }

  absl::Status ReduceScatterInto(at::Tensor& out, const at::Tensor& in, ReduceOp op) override {
    PKB_MPI_REQUIRE(out, "reduce_scatter_tensor");
    PKB_MPI_REQUIRE(in, "reduce_scatter_tensor");
    if (in.numel() != out.numel() * size_ || in.scalar_type() != out.scalar_type()) {
      return absl::InvalidArgumentError("reduce_scatter_tensor: input is not world_size x output");
    }
    MPI_Datatype type;
    MPI_Op mop;
    auto s = TypeAndOp(in, op, &type, &mop);
    if (!s.ok()) return s;
    return Check(MPI_Reduce_scatter_block(in.data_ptr(), out.data_ptr(),
                                          static_cast<int>(out.numel()), type, mop, comm_),
                 "reduce_scatter");
  }

  absl::Status Broadcast(at::Tensor& t, int root) override {
    PKB_MPI_REQUIRE(t, "broadcast");
    return Check(MPI_Bcast(t.data_ptr(), static_cast<int>(t.nbytes()), MPI_BYTE, root, comm_),
                 "broadcast");
  }

  absl::Status Reduce(at::Tensor& t, int root, ReduceOp op) override {
    PKB_MPI_REQUIRE(t, "reduce");
    MPI_Datatype type;
    MPI_Op mop;
    auto s = TypeAndOp(t, op, &type, &mop);
    if (!s.ok()) return s;
    void* send = rank_ == root ? MPI_IN_PLACE : t.data_ptr();
    // Non-root ranks keep their buffer untouched (MPI writes no receive buffer there).
    return Check(MPI_Reduce(send, rank_ == root ? t.data_ptr() : nullptr,
                            static_cast<int>(t.numel()), type, mop, root, comm_),
                 "reduce");
  }

  absl::Status AllToAllSingle(at::Tensor& out, const at::Tensor& in,
                              const std::vector<int64_t>& out_splits,
                              const std::vector<int64_t>& in_splits) override {
    PKB_MPI_REQUIRE(out, "all_to_all_single");
    PKB_MPI_REQUIRE(in, "all_to_all_single");
    auto counts = [&](const at::Tensor& t, const std::vector<int64_t>& splits, std::vector<int>* c,
                      std::vector<int>* d) -> absl::Status {
      int64_t rows = t.dim() == 0 ? 1 : t.size(0);
      int64_t row_bytes = rows == 0 ? 0 : static_cast<int64_t>(t.nbytes()) / rows;
      c->assign(size_, 0);
      d->assign(size_, 0);
      if (splits.empty()) {
        if (rows % size_ != 0) {
          return absl::InvalidArgumentError("all_to_all_single: dim 0 not divisible by world");
        }
        for (int i = 0; i < size_; ++i) (*c)[i] = static_cast<int>(rows / size_ * row_bytes);
      } else {
        if (static_cast<int>(splits.size()) != size_) {
          return absl::InvalidArgumentError(
              "all_to_all_single: splits must have world_size entries");
        }
        int64_t total = 0;
        for (int i = 0; i < size_; ++i) {
          (*c)[i] = static_cast<int>(splits[i] * row_bytes);
          total += splits[i];
        }
        if (total != rows)
          return absl::InvalidArgumentError("all_to_all_single: splits do not sum to dim 0");
      }
      for (int i = 1; i < size_; ++i) (*d)[i] = (*d)[i - 1] + (*c)[i - 1];
      return absl::OkStatus();
    };
    std::vector<int> sc, sd, rc, rd;
    auto s = counts(in, in_splits, &sc, &sd);
    if (!s.ok()) return s;
    s = counts(out, out_splits, &rc, &rd);
    if (!s.ok()) return s;
    return Check(MPI_Alltoallv(in.data_ptr(), sc.data(), sd.data(), MPI_BYTE, out.data_ptr(),
                               rc.data(), rd.data(), MPI_BYTE, comm_),
                 "all_to_all");
  }

  absl::Status Gather(std::vector<at::Tensor>& outs, const at::Tensor& in, int root) override {
    PKB_MPI_REQUIRE(in, "gather");
    at::Tensor buf;
    if (rank_ == root) buf = at::empty({size_, in.numel()}, in.options());
    auto s = Check(MPI_Gather(in.data_ptr(), static_cast<int>(in.nbytes()), MPI_BYTE,
                              rank_ == root ? buf.data_ptr() : nullptr,
                              static_cast<int>(in.nbytes()), MPI_BYTE, root, comm_),
                   "gather");
    if (!s.ok()) return s;
    if (rank_ == root) {
      outs.clear();
      for (int i = 0; i < size_; ++i) outs.push_back(buf[i].view(in.sizes()));
    }
    return absl::OkStatus();
  }

  absl::Status Scatter(at::Tensor& out, const std::vector<at::Tensor>& ins, int root) override {
    PKB_MPI_REQUIRE(out, "scatter");
    at::Tensor buf;
    if (rank_ == root) {
      if (static_cast<int>(ins.size()) != size_) {
        return absl::InvalidArgumentError("scatter: root needs world_size tensors");
      }
      buf = at::stack(ins).contiguous();
    }
    return Check(MPI_Scatter(rank_ == root ? buf.data_ptr() : nullptr,
                             static_cast<int>(out.nbytes()), MPI_BYTE, out.data_ptr(),
                             static_cast<int>(out.nbytes()), MPI_BYTE, root, comm_),
                 "scatter");
  }

  absl::Status BatchP2P(const std::vector<P2POp>& ops) override {
    std::vector<MPI_Request> reqs(ops.size());
    for (size_t i = 0; i < ops.size(); ++i) {
      const auto& op = ops[i];
      PKB_MPI_REQUIRE(op.tensor, "batch_isend_irecv");
      int n = static_cast<int>(op.tensor.nbytes());
      int rc = op.kind == P2POp::kSend
                   ? MPI_Isend(op.tensor.data_ptr(), n, MPI_BYTE, op.peer, 0, comm_, &reqs[i])
                   : MPI_Irecv(op.tensor.data_ptr(), n, MPI_BYTE, op.peer, 0, comm_, &reqs[i]);
      auto s = Check(rc, "batch_isend_irecv");
      if (!s.ok()) return s;
    }
    return Check(MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE),
                 "batch_isend_irecv wait");
  }

  absl::Status Barrier() override { return Check(MPI_Barrier(comm_), "barrier"); }

  Comm* Group(const std::string& name) override {
    auto it = groups_.find(name);
    return it == groups_.end() ? nullptr : it->second.get();
  }

  void AddGroup(const std::string& name, std::unique_ptr<Comm> c) { groups_[name] = std::move(c); }

 private:
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  std::vector<int> global_ranks_;
  std::map<std::string, std::unique_ptr<Comm>> groups_;
};

}  // namespace

int MpiWorldRank() {
  EnsureInit();
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

void FinalizeMpi() {
  int inited = 0, fin = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&fin);
  if (inited && !fin) MPI_Finalize();
}

int MpiWorldSize() {
  EnsureInit();
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

absl::StatusOr<std::unique_ptr<Comm>> MakeMpiWorld(const std::vector<GroupLayout>& groups) {
  EnsureInit();
  int rank = MpiWorldRank(), size = MpiWorldSize();
  std::vector<int> all(size);
  for (int i = 0; i < size; ++i) all[i] = i;
  auto world = std::make_unique<MpiComm>(MPI_COMM_WORLD, all);
  for (const auto& layout : groups) {
    int color = -1, key = 0;
    std::vector<int> members;
    for (size_t c = 0; c < layout.partition.size(); ++c) {
      for (size_t k = 0; k < layout.partition[c].size(); ++k) {
        if (layout.partition[c][k] == rank) {
          color = static_cast<int>(c);
          key = static_cast<int>(k);
          members = layout.partition[c];
        }
      }
    }
    MPI_Comm sub;
    auto s = Check(MPI_Comm_split(MPI_COMM_WORLD, color < 0 ? MPI_UNDEFINED : color, key, &sub),
                   "comm_split");
    if (!s.ok()) return s;
    if (color >= 0) world->AddGroup(layout.name, std::make_unique<MpiComm>(sub, members));
  }
  return std::unique_ptr<Comm>(std::move(world));
}

}  // namespace pkb
