// The candidate host: the process a rank's harness (the judge, rank_main.cc) starts to run the
// submission in, as `pkb-rank --candidate-host` with its end of the judge's socket on descriptor
// 3. It maps the judge's shared segments, builds the candidate's context (its own stream, NCCL
// communicators among the hosts and symmetric memory), and calls the candidate on the judge's
// request (rank_host.proto). It never holds the reference's outputs, the comparison, the report
// or its key: whatever the submission does here, the verdict is the judge's.
#include <signal.h>
#include <sys/prctl.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/eval_spec.h"
#include "pkb/v1/rank_host.pb.h"
#include "problems/harness/check.h"
#include "worker/engine/candidate_loader.h"
#include "worker/engine/host_channel.h"
#include "worker/engine/rank_device.h"

namespace pkb {
namespace {

// One call's arguments as the candidate sees them, with views of its outputs where its loop
// snapshots or re-poisons them (OutputViews).
struct PreparedCall {
  std::vector<pkb_tensor> inputs, outputs;
  std::vector<std::string> scalar_names;
  std::vector<pkb_scalar> scalars;
  std::vector<at::Tensor> output_views;
};

class HostProcess {
 public:
  explicit HostProcess(HostChannel* ch) : ch_(ch) {}

  // Serves the judge's requests until it goes away (or kills this process).
  absl::Status Serve() {
    for (;;) {
      v1::HostRequest req;
      int fd = -1;
      PKB_RETURN_IF_ERROR(ch_->Receive(&req, &fd));
      v1::HostReply reply;
      absl::Status st;
      try {
        st = Handle(req, fd, &reply);
      } catch (const std::exception& e) {
        st = absl::AbortedError(absl::StrCat("exception: ", e.what()));
      }
      reply.set_ok(st.ok());
      if (!st.ok()) reply.set_error(std::string(st.message()).substr(0, 4096));
      PKB_RETURN_IF_ERROR(ch_->Send(reply));
    }
  }

  // pkb_context::host_barrier: the judges' barrier, asked for through our judge.
  int Barrier() {
    v1::HostReply ask;
    ask.set_ask_barrier(true);
    v1::HostRequest done;
    if (!ch_->Send(ask).ok() || !ch_->Receive(&done).ok() || !done.barrier_done()) {
      error_ = "host_barrier: the harness did not complete the barrier";
      return 1;
    }
    return 0;
  }

  std::string& error() { return error_; }
  RankDevice* device() { return dev_.get(); }
  const std::vector<pkb_group>& groups() const { return groups_; }
  const std::vector<std::string>& group_names() const { return group_names_; }

 private:
  absl::Status Handle(const v1::HostRequest& req, int fd, v1::HostReply* reply) {
    switch (req.kind_case()) {
      case v1::HostRequest::kDevice:
        return SetUpDevice(req.device());
      case v1::HostRequest::kInit:
        return Init(req.init());
      case v1::HostRequest::kLoad:
        return Load();
      case v1::HostRequest::kMap: {
        RankDevice::SharedSegment s;
        s.bytes = static_cast<size_t>(req.map().bytes());
        s.fd = fd;
        s.cuda_ipc_handle = req.map().cuda_ipc_handle();
        absl::Status st = dev_ ? dev_->MapShared(s) : absl::FailedPreconditionError("no init");
        if (fd >= 0) close(fd);  // the mapping stays
        s.fd = -1;
        if (st.ok()) segments_[req.map().id()] = s;
        return st;
      }
      case v1::HostRequest::kUnmap: {
        auto it = segments_.find(req.unmap());
        if (it == segments_.end()) return absl::NotFoundError("no such segment");
        dev_->UnmapShared(it->second);
        segments_.erase(it);
        return absl::OkStatus();
      }
      case v1::HostRequest::kCall: {
        if (!cand_.run) return absl::FailedPreconditionError("a call before load");
        PKB_ASSIGN_OR_RETURN(PreparedCall call, Prepare(req.call(), /*views=*/false));
        PKB_RETURN_IF_ERROR(Run(call));
        return dev_->Synchronize();
      }
      case v1::HostRequest::kLoop:
        PKB_RETURN_IF_ERROR(PrepareLoop(req.loop()));
        return req.loop().defer() ? absl::OkStatus() : RunLoop();
      case v1::HostRequest::kRunLoop:
        return RunLoop(reply);
      case v1::HostRequest::kProfile: {
        if (!cand_.run) return absl::FailedPreconditionError("a call before load");
        PKB_ASSIGN_OR_RETURN(PreparedCall call, Prepare(req.profile(), /*views=*/false));
        PKB_ASSIGN_OR_RETURN(*reply->mutable_profile(), dev_->Profile([&] { return Run(call); }));
        return absl::OkStatus();
      }
      case v1::HostRequest::kTimes:
        for (int i = 0; i < timed_; ++i) reply->add_us(dev_->ElapsedUs(i));
        return absl::OkStatus();
      default:
        return absl::InvalidArgumentError("a request the host does not know");
    }
  }

  // The device and the world communicator, ahead of the job (HostRequest.device).
  absl::Status SetUpDevice(const v1::HostInit& device);
  absl::Status Init(const v1::HostInit& init);
  absl::Status Load();

  absl::StatusOr<pkb_tensor> Tensor(const v1::HostTensor& t) {
    auto seg = segments_.find(t.segment());
    if (seg == segments_.end() || t.offset() < 0 ||
        static_cast<size_t>(t.offset()) > seg->second.bytes || t.shape_size() > PKB_MAX_DIMS ||
        t.shape_size() != t.strides_size()) {
      return absl::InvalidArgumentError("a tensor outside the shared segments");
    }
    pkb_tensor p{};
    p.data = static_cast<char*>(seg->second.base) + t.offset();
    p.dtype = t.dtype();
    p.ndim = t.shape_size();
    for (int i = 0; i < p.ndim; ++i) {
      p.shape[i] = t.shape(i);
      p.strides[i] = t.strides(i);
    }
    p.device_type = dev_->device_type();
    p.device_index = dev_->device_index();
    return p;
  }

  // With `views`, ATen views of the outputs too (OutputViews).
  absl::StatusOr<PreparedCall> Prepare(const v1::HostCall& c, bool views) {
    PreparedCall call;
    for (const auto& t : c.inputs()) {
      PKB_ASSIGN_OR_RETURN(auto p, Tensor(t));
      call.inputs.push_back(p);
    }
    for (const auto& t : c.outputs()) {
      PKB_ASSIGN_OR_RETURN(auto p, Tensor(t));
      call.outputs.push_back(p);
    }
    if (views) PKB_RETURN_IF_ERROR(OutputViews(c, &call));
    for (const auto& s : c.scalars()) call.scalar_names.push_back(s.name());
    for (int i = 0; i < c.scalars_size(); ++i) {
      const auto& s = c.scalars(i);
      call.scalars.push_back({call.scalar_names[i].c_str(),
                              s.is_int() ? PKB_SCALAR_INT : PKB_SCALAR_FLOAT, s.i(), s.f()});
    }
    return call;
  }

  // One call of pkb_run, not synchronized.
  absl::Status Run(PreparedCall& c) {
    error_.clear();
    int rc = cand_.run(&ctx_, c.inputs.data(), static_cast<int>(c.inputs.size()), c.scalars.data(),
                       static_cast<int>(c.scalars.size()), c.outputs.data(),
                       static_cast<int>(c.outputs.size()));
    if (rc != 0) {
      return absl::AbortedError(
          absl::StrCat("pkb_run returned ", rc, error_.empty() ? "" : ": ", error_));
    }
    return absl::OkStatus();
  }

  // ATen views of a call's outputs, for the loop's snapshots and repoisoning: made only for the
  // calls that need them (a view costs microseconds, and a round has thousands of calls).
  absl::Status OutputViews(const v1::HostCall& c, PreparedCall* call) {
    if (!call->output_views.empty() || c.outputs_size() == 0) return absl::OkStatus();
    for (const auto& t : c.outputs()) {
      PKB_ASSIGN_OR_RETURN(at::Tensor view, View(t));
      call->output_views.push_back(view);
    }
    return absl::OkStatus();
  }

  // A view of a shared tensor, for copies and poison.
  absl::StatusOr<at::Tensor> View(const v1::HostTensor& t) {
    PKB_ASSIGN_OR_RETURN(pkb_tensor p, Tensor(t));
    PKB_ASSIGN_OR_RETURN(at::ScalarType type, ScalarTypeOfPkb(p.dtype));
    return at::from_blob(p.data, std::vector<int64_t>(t.shape().begin(), t.shape().end()),
                         std::vector<int64_t>(t.strides().begin(), t.strides().end()),
                         at::TensorOptions().dtype(type).device(dev_->device()));
  }

  absl::Status PrepareLoop(const v1::HostLoop& loop) {
    loop_ = PreparedLoop();
    loop_.loop = loop;
    for (const auto& c : loop.calls()) {
      PKB_ASSIGN_OR_RETURN(auto p, Prepare(c, /*views=*/loop.repoison()));
      loop_.calls.push_back(std::move(p));
    }
    loop_.last_use.assign(loop_.calls.size(), -1);
    for (int i = 0; i < loop.order_size(); ++i) {
      const int c = loop.order(i);
      if (c < 0 || c >= static_cast<int>(loop_.calls.size())) {
        return absl::InvalidArgumentError("a loop over a call it does not have");
      }
      loop_.last_use[c] = i;
    }
    for (const auto& snap : loop.snapshots()) {
      if (snap.iteration() < 0 || snap.iteration() >= loop.order_size())
        return absl::InvalidArgumentError("a snapshot of an iteration the loop does not have");
      const int c = loop.order(snap.iteration());
      PKB_RETURN_IF_ERROR(OutputViews(loop.calls(c), &loop_.calls[c]));
      auto& into = loop_.snapshots[snap.iteration()];
      for (const auto& t : snap.into()) {
        PKB_ASSIGN_OR_RETURN(at::Tensor v, View(t));
        into.push_back(v);
      }
    }
    // The timers exist before the loop runs: creating them is no part of the timed window.
    loop_.stride = std::max(1, loop.timer_stride());
    if (loop.timed()) dev_->ResetTimers(MarkedCalls(loop.order_size(), loop_.stride));
    loop_.ready = true;
    return absl::OkStatus();
  }

  // Answers once the device is idle; the times are read by a `times` request after. With
  // `trace`, when each phase ended on this process's monotonic clock (for the judge's log).
  absl::Status RunLoop(v1::HostReply* trace = nullptr) {
    auto now_ns = [] {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(
                 std::chrono::steady_clock::now().time_since_epoch())
          .count();
    };
    if (trace) trace->add_trace_ns(now_ns());
    if (!loop_.ready || !cand_.run) return absl::FailedPreconditionError("no loop prepared");
    loop_.ready = false;
    const v1::HostLoop& loop = loop_.loop;
    const int n = loop.order_size();
    timed_ = 0;
    for (int i = 0; i < n; ++i) {
      const int c = loop.order(i);
      PreparedCall& call = loop_.calls[c];
      const bool marked = loop.timed() && i % loop_.stride == 0;
      if (marked) dev_->Mark(i / loop_.stride, 0);
      PKB_RETURN_IF_ERROR(Run(call));
      if (marked) dev_->Mark(i / loop_.stride, 1);
      auto snap = loop_.snapshots.find(i);
      if (snap != loop_.snapshots.end()) {
        for (size_t k = 0; k < snap->second.size() && k < call.output_views.size(); ++k) {
          snap->second[k].copy_(call.output_views[k]);
        }
      }
      // A set that comes back is poisoned right after its use (outside the timers), so that
      // skipped work on it leaves poison for the judge's checks.
      if (loop.repoison() && i != loop_.last_use[c]) {
        for (auto& t : call.output_views) Poison(t, i % 2);
      }
    }
    if (trace) trace->add_trace_ns(now_ns());
    PKB_RETURN_IF_ERROR(dev_->Synchronize());
    if (trace) trace->add_trace_ns(now_ns());
    if (loop.timed()) timed_ = MarkedCalls(n, loop_.stride);
    return absl::OkStatus();
  }

  struct PreparedLoop {
    bool ready = false;
    int stride = 1;
    v1::HostLoop loop;
    std::vector<PreparedCall> calls;
    std::vector<int> last_use;
    std::map<int, std::vector<at::Tensor>> snapshots;
  };

  HostChannel* ch_;
  std::unique_ptr<RankDevice> dev_;
  std::optional<v1::HostInit> early_device_;  // what SetUpDevice set dev_ up for
  bool initialized_ = false;
  std::shared_ptr<void> stream_guard_;
  std::map<int, RankDevice::SharedSegment> segments_;
  PreparedLoop loop_;
  int timed_ = 0;  // marked iterations of the last timed loop run
  std::string candidate_;
  Candidate cand_;
  pkb_context ctx_{};
  std::string error_;
  std::vector<std::string> group_names_;
  std::vector<std::vector<int32_t>> group_ranks_;
  std::vector<pkb_group> groups_;
};

HostProcess* TheHostProcess(pkb_context* ctx) { return static_cast<HostProcess*>(ctx->harness); }

int CtxSymmAlloc(pkb_context* ctx, size_t bytes, pkb_symm* out) {
  return TheHostProcess(ctx)->device()->SymmAlloc(bytes, out, &TheHostProcess(ctx)->error());
}
int CtxBarrier(pkb_context* ctx) { return TheHostProcess(ctx)->Barrier(); }
void CtxSetError(pkb_context* ctx, const char* message) {
  TheHostProcess(ctx)->error() = std::string(message ? message : "").substr(0, 4096);
}
void CtxLog(pkb_context* ctx, const char* message) {
  static int lines = 0;
  if (++lines <= 100) std::fprintf(stderr, "[candidate rank %d] %.1000s\n", ctx->rank, message);
}
const pkb_group* CtxGroup(pkb_context* ctx, const char* name) {
  HostProcess* h = TheHostProcess(ctx);
  for (size_t i = 0; i < h->groups().size(); ++i) {
    if (h->group_names()[i] == name) return &h->groups()[i];
  }
  return nullptr;
}

absl::Status HostProcess::SetUpDevice(const v1::HostInit& device) {
  if (dev_) return absl::FailedPreconditionError("a device request after the device was set up");
  RankIdentity id{device.rank(), device.world(), device.rendezvous(), [this]() -> absl::Status {
                    if (Barrier() != 0) return absl::UnavailableError(error_);
                    return absl::OkStatus();
                  }};
  if (device.backend() == "cpu") {
#ifdef PKB_WITH_MPI
    PKB_ASSIGN_OR_RETURN(dev_, MakeCpuRankDevice(id));
#else
    return absl::FailedPreconditionError("this build of pkb-rank has no CPU backend");
#endif
  } else {
#ifdef PKB_WITH_CUDA
    id.share_gpu = device.backend() == "cuda-shared";
    PKB_ASSIGN_OR_RETURN(dev_, MakeCudaRankDevice(id));
    // NCCL communicators among the hosts are the candidate's. None where ranks share a GPU:
    // NCCL refuses that, and the candidate's nccl_comm is null.
    if (!id.share_gpu) PKB_RETURN_IF_ERROR(dev_->PrepareWorld());
#else
    return absl::FailedPreconditionError("this build of pkb-rank has no CUDA support");
#endif
  }
  early_device_ = device;
  return absl::OkStatus();
}

absl::Status HostProcess::Init(const v1::HostInit& init) {
  if (initialized_) return absl::FailedPreconditionError("init twice");
  initialized_ = true;
  if (early_device_) {
    const v1::HostInit& d = *early_device_;
    if (d.backend() != init.backend() || d.rank() != init.rank() || d.world() != init.world() ||
        d.rendezvous() != init.rendezvous()) {
      return absl::FailedPreconditionError(
          "init names another backend, rank, world or rendezvous than the device set up early");
    }
  } else {
    v1::HostInit device = init;
    device.clear_candidate();
    device.clear_groups();
    PKB_RETURN_IF_ERROR(SetUpDevice(device));
  }
  std::vector<GroupLayout> layouts;
  for (const auto& g : init.groups()) {
    GroupLayout l;
    l.name = g.name();
    for (const auto& part : g.partition())
      l.partition.emplace_back(part.ranks().begin(), part.ranks().end());
    layouts.push_back(std::move(l));
  }
#ifdef PKB_WITH_CUDA
  // The problem's groups beside the world communicator: the candidate's (none where ranks share
  // a GPU).
  if (init.backend() == "cuda") PKB_RETURN_IF_ERROR(dev_->MakeComm(layouts).status());
#endif
  stream_guard_ = dev_->UseStream();

  // The groups as the candidate sees them: "world", then each group this rank belongs to.
  group_names_.push_back("world");
  group_ranks_.emplace_back();
  for (int r = 0; r < init.world(); ++r) group_ranks_.back().push_back(r);
  std::vector<int> group_rank = {init.rank()};
  for (const auto& l : layouts) {
    for (const auto& part : l.partition) {
      for (size_t k = 0; k < part.size(); ++k) {
        if (part[k] != init.rank()) continue;
        group_names_.push_back(l.name);
        group_ranks_.emplace_back(part.begin(), part.end());
        group_rank.push_back(static_cast<int>(k));
      }
    }
  }
  for (size_t i = 0; i < group_names_.size(); ++i) {
    groups_.push_back({group_names_[i].c_str(), group_rank[i],
                       static_cast<int32_t>(group_ranks_[i].size()), group_ranks_[i].data(),
                       dev_->nccl_comm(group_names_[i])});
  }
  ctx_.api_version = PKB_API_VERSION;
  ctx_.rank = init.rank();
  ctx_.world_size = init.world();
  ctx_.device_type = dev_->device_type();
  ctx_.device_index = dev_->device_index();
  ctx_.stream = dev_->stream();
  ctx_.nccl_comm = dev_->nccl_comm("world");
  ctx_.num_groups = static_cast<int32_t>(groups_.size());
  ctx_.groups = groups_.data();
  ctx_.symm_alloc = &CtxSymmAlloc;
  ctx_.host_barrier = &CtxBarrier;
  ctx_.set_error = &CtxSetError;
  ctx_.log = &CtxLog;
  ctx_.group = &CtxGroup;
  ctx_.harness = this;

  candidate_ = init.candidate();
  return absl::OkStatus();
}

absl::Status HostProcess::Load() {
  if (!dev_ || cand_.handle) return absl::FailedPreconditionError("load before init, or twice");
  PKB_ASSIGN_OR_RETURN(cand_, LoadCandidate(candidate_));
  if (cand_.init) {
    error_.clear();
    int rc = cand_.init(&ctx_);
    absl::Status synced = dev_->Synchronize();
    if (rc != 0 || !synced.ok()) {
      return absl::AbortedError(absl::StrCat("pkb_init failed on rank ", ctx_.rank, ": ",
                                             rc != 0 ? error_ : std::string(synced.message())));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int CandidateHostMain(int channel_fd) {
  // Nothing of ours outlives the judge.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  HostChannel ch(channel_fd);
  HostProcess host(&ch);
  absl::Status st;
  try {
    st = host.Serve();
  } catch (const std::exception& e) {
    st = absl::InternalError(absl::StrCat("exception: ", e.what()));
  }
  if (!st.ok()) std::fprintf(stderr, "candidate host: %s\n", std::string(st.message()).c_str());
  std::fflush(stderr);
  // The candidate's static destructors are not ours to run.
  std::_Exit(st.ok() ? 0 : 1);
}

}  // namespace pkb
