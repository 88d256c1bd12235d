// Load test of the coordinator over loopback: many simulated workers whose executor answers at
// once (InstantWorker, a test double: every lease ends with an immediate OK), many submitters,
// and many open Watch streams. Reports Submit/s, submit-to-verdict latency, connected workers and
// open watch streams.
//
//   pkb-coordinator --listen 127.0.0.1:7400 --db /tmp/load.db --catalog-json catalog.json &
//   coordinator_load --coordinator 127.0.0.1:7400 --workers 1000 --watchers 10000 --submitters 32
//   --seconds 10
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <iostream>
#include <mutex>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/coordinator_load/instant_worker.h"
#include "pkb/v1/evaluation.grpc.pb.h"
#include "pkb/v1/worker.grpc.pb.h"

namespace pkb {
namespace {

// One open Watch stream on a job that never runs.
class Watcher : public grpc::ClientReadReactor<v1::EvalEvent> {
 public:
  Watcher(v1::Evaluation::Stub* stub, const std::string& job_id) {
    req_.set_job_id(job_id);
    stub->async()->Watch(&ctx_, &req_, this);
    StartRead(&ev_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    got_event = true;
    StartRead(&ev_);
  }
  void OnDone(const grpc::Status&) override { done = true; }
  void Stop() { ctx_.TryCancel(); }
  std::atomic<bool> got_event{false}, done{false};

 private:
  grpc::ClientContext ctx_;
  v1::WatchRequest req_;
  v1::EvalEvent ev_;
};

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  size_t i = std::min(v.size() - 1, static_cast<size_t>(p * v.size()));
  std::nth_element(v.begin(), v.begin() + i, v.end());
  return v[i];
}

int Main(int argc, char** argv) {
  std::string address = "127.0.0.1:7400";
  int workers = 100, watchers = 1000, submitters = 16, channels = 8;
  double seconds = 10;
  CLI::App app{"coordinator load test (simulated instant workers)"};
  app.add_option("--coordinator", address)->capture_default_str();
  app.add_option("--workers", workers)->capture_default_str();
  app.add_option("--watchers", watchers)->capture_default_str();
  app.add_option("--submitters", submitters)->capture_default_str();
  app.add_option("--channels", channels, "TCP connections the load is spread over")
      ->capture_default_str();
  app.add_option("--seconds", seconds)->capture_default_str();
  bool accept_only = false;
  app.add_flag("--accept-only", accept_only,
               "measure bare Submit: stop at the first event (the job is stored and queued), "
               "leave the job to the workers");
  CLI11_PARSE(app, argc, argv);

  std::vector<std::shared_ptr<grpc::Channel>> chans;
  for (int i = 0; i < channels; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("grpc.channel_id", i);  // distinct channels, not one shared subchannel
    chans.push_back(grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
  }
  auto worker_stub = [&](int i) { return v1::Worker::NewStub(chans[i % channels]); };
  auto eval_stub = [&](int i) { return v1::Evaluation::NewStub(chans[i % channels]); };

  // Workers.
  std::vector<std::unique_ptr<v1::Worker::Stub>> wstubs;
  for (int i = 0; i < channels; ++i) wstubs.push_back(worker_stub(i));
  std::vector<std::unique_ptr<InstantWorker>> ws;
  absl::Time t0 = absl::Now();
  for (int i = 0; i < workers; ++i)
    ws.push_back(
        std::make_unique<InstantWorker>(wstubs[i % channels].get(), absl::StrCat("sim-", i)));
  for (int i = 0; i < 600; ++i) {
    int n = 0;
    for (auto& w : ws) n += w->registered;
    if (n == workers) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  int registered = 0;
  for (auto& w : ws) registered += w->registered;
  std::cout << "workers registered: " << registered << "/" << workers << " in "
            << absl::FormatDuration(absl::Now() - t0) << std::endl;
  std::atomic<bool> stop{false};
  std::thread heartbeats([&] {
    while (!stop) {
      for (auto& w : ws) w->Heartbeat();
      for (int i = 0; i < 10 && !stop; ++i) absl::SleepFor(absl::Milliseconds(100));
    }
  });

  // Watchers on a job no worker can run (gpu class nobody has).
  auto estub = eval_stub(0);
  std::string parked;
  {
    grpc::ClientContext ctx;
    v1::SubmitRequest r;
    r.set_problem_id(1);
    r.set_world_size(2);
    r.set_gpu_class("parked");
    r.set_source(absl::StrCat("parked ", absl::ToUnixNanos(absl::Now())));
    auto reader = estub->Submit(&ctx, r);
    v1::EvalEvent e;
    if (reader->Read(&e)) parked = e.job_id();
    ctx.TryCancel();
  }
  std::vector<std::unique_ptr<v1::Evaluation::Stub>> estubs;
  for (int i = 0; i < channels; ++i) estubs.push_back(eval_stub(i));
  std::vector<std::unique_ptr<Watcher>> wat;
  t0 = absl::Now();
  for (int i = 0; i < watchers; ++i)
    wat.push_back(std::make_unique<Watcher>(estubs[i % channels].get(), parked));
  int open = 0;
  for (int i = 0; i < 600; ++i) {
    open = 0;
    for (auto& w : wat) open += w->got_event && !w->done;
    if (open == watchers) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  std::cout << "watch streams open (history received): " << open << "/" << watchers << " in "
            << absl::FormatDuration(absl::Now() - t0) << std::endl;

  // Submitters: unique sources (no cache), each waits for its verdict.
  std::mutex mu;
  std::vector<double> lat_ms;
  std::atomic<int> errors{0};
  std::vector<std::thread> ts;
  absl::Time start = absl::Now(), end = start + absl::Seconds(seconds);
  for (int t = 0; t < submitters; ++t) {
    ts.emplace_back([&, t] {
      auto stub = eval_stub(t);
      std::vector<double> mine;
      for (int i = 0; absl::Now() < end; ++i) {
        grpc::ClientContext ctx;
        v1::SubmitRequest r;
        r.set_problem_id(1);
        r.set_world_size(2);
        r.set_gpu_class("sim");
        r.set_source(absl::StrCat("load ", t, " ", i, " ", absl::ToUnixNanos(start)));
        absl::Time s = absl::Now();
        auto reader = stub->Submit(&ctx, r);
        v1::EvalEvent e;
        bool done = false;
        if (accept_only) {
          done = reader->Read(&e);  // the QUEUED event: Submit has answered
          if (done) mine.push_back(absl::ToDoubleMilliseconds(absl::Now() - s));
          ctx.TryCancel();
          reader->Finish().IgnoreError();
          if (!done) ++errors;
          continue;
        }
        while (reader->Read(&e)) done |= e.stage() == v1::DONE;
        if (!reader->Finish().ok() || !done) {
          ++errors;
          continue;
        }
        mine.push_back(absl::ToDoubleMilliseconds(absl::Now() - s));
      }
      std::lock_guard<std::mutex> l(mu);
      lat_ms.insert(lat_ms.end(), mine.begin(), mine.end());
    });
  }
  for (auto& t : ts) t.join();
  double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
  open = 0;
  for (auto& w : wat) open += w->got_event && !w->done;
  const char* what = accept_only ? "submissions accepted (submit -> first event)"
                                 : "submissions completed (submit -> verdict)";
  std::cout << what << ": " << lat_ms.size() << " in " << elapsed
            << " s = " << lat_ms.size() / elapsed << "/s, errors " << errors << "\n"
            << "latency " << (accept_only ? "submit -> QUEUED" : "submit -> DONE") << ": p50 "
            << Percentile(lat_ms, 0.5) << " ms, p99 " << Percentile(lat_ms, 0.99) << " ms\n"
            << "still open during the run: " << open << " watch streams, workers connected "
            << std::count_if(ws.begin(), ws.end(), [](auto& w) { return !w->done; }) << std::endl;
  stop = true;
  heartbeats.join();
  for (auto& w : wat) w->Stop();
  for (auto& w : ws) w->Stop();
  for (int i = 0; i < 100; ++i) {
    bool all = true;
    for (auto& w : wat) all &= w->done;
    for (auto& w : ws) all &= w->done;
    if (all) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return 0;
}

}  // namespace
}  // namespace pkb

int main(int argc, char** argv) { return pkb::Main(argc, argv); }
