// InstantWorker, a TEST DOUBLE of a worker for the coordinator benchmarks (coordinator_load,
// coordinator_soak): it registers over a real Worker.Connect stream, heartbeats when asked, and
// answers every lease at once with a verdict chosen from the source text, as
// tests/service/fake_pkb_eval.sh does: FAKE_COMPILE_ERROR -> COMPILE_ERROR, FAKE_REJECT ->
// REJECTED, anything else -> OK. Thread-safe: Heartbeat and Stop may be called from any thread.
#ifndef PKB_BENCH_COORDINATOR_LOAD_INSTANT_WORKER_H_
#define PKB_BENCH_COORDINATOR_LOAD_INSTANT_WORKER_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <deque>
#include <mutex>
#include <string>

#include "common/harness_version.h"
#include "pkb/v1/worker.grpc.pb.h"

namespace pkb {

class InstantWorker : public grpc::ClientBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage> {
 public:
  InstantWorker(v1::Worker::Stub* stub, const std::string& id) {
    stub->async()->Connect(&ctx_, this);
    v1::WorkerMessage reg;
    reg.mutable_register_()->set_worker_id(id);
    reg.mutable_register_()->set_healthy(true);
    auto* caps = reg.mutable_register_()->mutable_capabilities();
    caps->set_gpu_class("sim");
    caps->set_gpu_count(8);
    caps->set_max_world_size(8);
    caps->set_harness_version(pkb::HarnessVersion());
    Enqueue(reg);
    StartRead(&in_);
    StartCall();
  }
  void Heartbeat() {
    v1::WorkerMessage m;
    m.mutable_heartbeat()->set_healthy(true);
    Enqueue(m);
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    if (in_.has_register_ack()) registered = true;
    if (in_.has_lease()) {
      v1::WorkerMessage m;
      m.mutable_event()->set_job_id(in_.lease().job_id());
      m.mutable_event()->set_attempt(in_.lease().attempt());
      m.mutable_event()->mutable_event()->set_stage(v1::DONE);
      m.mutable_event()->mutable_event()->mutable_result()->set_status(
          Verdict(in_.lease().source()));
      m.mutable_event()->mutable_event()->mutable_result()->set_speedup(1.0);
      Enqueue(m);
    }
    StartRead(&in_);
  }
  static v1::Status Verdict(const std::string& source) {
    if (source.find("FAKE_COMPILE_ERROR") != std::string::npos) return v1::COMPILE_ERROR;
    if (source.find("FAKE_REJECT") != std::string::npos) return v1::REJECTED;
    return v1::OK;
  }
  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> l(mu_);
    out_.pop_front();
    writing_ = ok && !out_.empty();
    if (writing_) StartWrite(&out_.front());
  }
  void OnDone(const grpc::Status& s) override { done = true; }
  void Stop() { ctx_.TryCancel(); }
  std::atomic<bool> registered{false}, done{false};

 private:
  void Enqueue(const v1::WorkerMessage& m) {
    std::lock_guard<std::mutex> l(mu_);
    out_.push_back(m);
    if (!writing_) {
      writing_ = true;
      StartWrite(&out_.front());
    }
  }
  grpc::ClientContext ctx_;
  v1::CoordinatorMessage in_;
  std::mutex mu_;
  std::deque<v1::WorkerMessage> out_;
  bool writing_ = false;
};

}  // namespace pkb

#endif  // PKB_BENCH_COORDINATOR_LOAD_INSTANT_WORKER_H_
