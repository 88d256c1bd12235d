// libFuzzer target: the coordinator's request handling. Each input is a script of up to 48 calls
// on one Scheduler (real SQLite store in memory, fake clock): submissions from agents, and the
// messages of worker streams (register, heartbeat, job events, drain, disconnect), with every
// field drawn from the input — ids of real jobs and leases as often as made-up ones, so that the
// fuzzer reaches the lease and event paths and not only the validation.
//
// Beyond "no crash, no sanitizer report": every job Submit accepted must still be readable after
// the script (nothing is lost), and a finished job carries a result.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "server/clock.h"
#include "server/problem_catalog.h"
#include "server/scheduler.h"
#include "server/sqlite_job_store.h"
#include "spdlog/spdlog.h"

namespace pkb {
namespace {

const char* kCatalog = R"({"problems":[
  {"id":1,"slug":"1_allreduce","version":1,"defaultM":64,"defaultN":64,"defaultDtype":"bfloat16",
   "layouts":[{"worldSize":1,"supported":true},{"worldSize":2,"supported":true},
              {"worldSize":3,"supported":false,"unsupportedReason":"m must divide by W"},
              {"worldSize":8,"supported":true}]},
  {"id":49,"slug":"49_moe_ep_balanced","version":2,"defaultM":1024,"defaultN":1024,
   "defaultDtype":"bfloat16","layouts":[{"worldSize":1,"supported":false,
   "unsupportedReason":"needs W >= 2"},{"worldSize":2,"supported":true}]}]})";

// TEST DOUBLE: a worker stream that remembers the leases and compile tasks it was sent.
struct Connection : WorkerConnection {
  void Send(const v1::CoordinatorMessage& m) override {
    if (m.has_lease()) leases.push_back(m.lease());
    if (m.has_compile()) compile_tasks.push_back(m.compile().task_id());
  }
  void Close(const absl::Status&) override { closed = true; }
  std::vector<v1::Lease> leases;
  std::vector<std::string> compile_tasks;
  bool closed = false;
};

// TEST DOUBLE: a watcher that counts events.
struct Sink : EventSink {
  void OnEvent(const v1::EvalEvent&) override { ++events; }
  int events = 0;
};

void Fail(const std::string& what) {
  std::fprintf(stderr, "scheduler_fuzz invariant broken: %s\n", what.c_str());
  std::abort();
}

std::string Text(FuzzedDataProvider& in, size_t max) { return in.ConsumeRandomLengthString(max); }

// A value that is usually ordinary and sometimes at the edges.
int64_t Number(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0:
      return in.ConsumeIntegralInRange<int64_t>(-2, 9);
    case 1:
      return in.ConsumeIntegralInRange<int64_t>(0, 1 << 16);
    default:
      return in.ConsumeIntegral<int64_t>();
  }
}

v1::SubmitRequest Request(FuzzedDataProvider& in) {
  v1::SubmitRequest r;
  const int problems[] = {0, 1, 2, 49, -1};
  r.set_problem_id(in.PickValueInArray(problems));
  r.set_world_size(static_cast<int32_t>(in.ConsumeIntegralInRange<int64_t>(-1, 9)));
  r.set_source(Text(in, 256));
  const char* dtypes[] = {"", "bfloat16", "float32", "float16", "float64", "int8", "bogus"};
  r.set_dtype(in.ConsumeBool() ? in.PickValueInArray(dtypes) : Text(in, 16));
  r.set_m(Number(in));
  r.set_n(Number(in));
  r.set_trials(static_cast<int32_t>(Number(in)));
  r.set_warmup(static_cast<int32_t>(Number(in)));
  r.set_iters(static_cast<int32_t>(Number(in)));
  const char* classes[] = {"", "any", "h200", "cpu"};
  r.set_gpu_class(in.ConsumeBool() ? in.PickValueInArray(classes) : Text(in, 16));
  r.set_no_cache(in.ConsumeBool());
  r.set_submitter(Text(in, 16));
  r.set_model(Text(in, 16));
  int tags = in.ConsumeIntegralInRange<int>(0, 20);
  for (int i = 0; i < tags; ++i) r.add_tags(Text(in, 80));
  r.set_ranked(in.ConsumeBool());
  return r;
}

struct Script {
  FakeClock clock{absl::FromUnixSeconds(1'000'000)};
  std::unique_ptr<SqliteJobStore> store;
  std::unique_ptr<Scheduler> scheduler;
  std::map<uint64_t, std::shared_ptr<Connection>> connections;
  std::vector<std::string> job_ids;
  std::vector<std::shared_ptr<Sink>> sinks;

  std::string JobId(FuzzedDataProvider& in) {
    if (!job_ids.empty() && in.ConsumeBool())
      return job_ids[in.ConsumeIntegralInRange<size_t>(0, job_ids.size() - 1)];
    return Text(in, 40);
  }
  // A lease some worker holds, or nothing.
  const v1::Lease* AnyLease(FuzzedDataProvider& in, uint64_t* conn) {
    std::vector<std::pair<uint64_t, const v1::Lease*>> all;
    for (const auto& [id, c] : connections)
      for (const auto& l : c->leases) all.push_back({id, &l});
    if (all.empty()) return nullptr;
    auto pick = all[in.ConsumeIntegralInRange<size_t>(0, all.size() - 1)];
    *conn = pick.first;
    return pick.second;
  }

  void Step(FuzzedDataProvider& in, const ProblemCatalogIndex& catalog) {
    uint64_t conn = in.ConsumeIntegralInRange<uint64_t>(1, 4);
    switch (in.ConsumeIntegralInRange<int>(0, 12)) {
      case 0:
      case 1: {
        auto out = scheduler->Submit(Request(in));
        if (out.ok()) job_ids.push_back(out->job_id);
        break;
      }
      case 2: {
        v1::Register reg;
        reg.set_worker_id(in.ConsumeBool() ? absl::StrCat("w", conn) : Text(in, 24));
        reg.set_healthy(in.ConsumeBool());
        auto* caps = reg.mutable_capabilities();
        const char* classes[] = {"h200", "cpu", "", "any"};
        caps->set_gpu_class(in.PickValueInArray(classes));
        caps->set_max_world_size(static_cast<int32_t>(in.ConsumeIntegralInRange<int>(-1, 9)));
        caps->set_harness_version(in.ConsumeBool() ? "h1" : Text(in, 8));
        caps->set_slots(static_cast<int32_t>(in.ConsumeIntegralInRange<int>(-1, 3)));
        // Compile slots reach the compiles ahead of queued jobs (up to 7 at once, as a worker's
        // default of 8 gives).
        caps->set_compile_slots(static_cast<int32_t>(in.ConsumeIntegralInRange<int>(0, 8)));
        int running = in.ConsumeIntegralInRange<int>(0, 2);
        for (int i = 0; i < running; ++i) reg.add_running_job_ids(JobId(in));
        auto c = std::make_shared<Connection>();
        connections[conn] = c;
        (void)scheduler->Connect(conn, reg, c);
        break;
      }
      case 3:
      case 4: {
        v1::JobEvent je;
        uint64_t holder = conn;
        const v1::Lease* lease = in.ConsumeBool() ? AnyLease(in, &holder) : nullptr;
        je.set_job_id(lease ? lease->job_id() : JobId(in));
        je.set_attempt(lease && in.ConsumeBool() ? lease->attempt()
                                                 : static_cast<int32_t>(Number(in)));
        v1::EvalEvent* e = je.mutable_event();
        e->set_stage(static_cast<v1::Stage>(in.ConsumeIntegralInRange<int>(-1, 8)));
        e->set_sequence(Number(in));
        e->set_message(Text(in, 64));
        e->set_trial(static_cast<int32_t>(Number(in)));
        if (in.ConsumeBool()) {
          v1::EvalResult* r = e->mutable_result();
          r->set_status(static_cast<v1::Status>(in.ConsumeIntegralInRange<int>(-1, 11)));
          r->set_message(Text(in, 64));
          r->set_speedup(in.ConsumeFloatingPoint<double>());
          r->mutable_candidate()->set_median_us(in.ConsumeFloatingPoint<double>());
          r->set_job_key(Text(in, 16));
        }
        (void)scheduler->OnJobEvent(in.ConsumeBool() ? holder : conn, je);
        break;
      }
      case 5: {
        v1::Heartbeat hb;
        hb.set_healthy(in.ConsumeBool());
        int running = in.ConsumeIntegralInRange<int>(0, 2);
        for (int i = 0; i < running; ++i) hb.add_running_job_ids(JobId(in));
        (void)scheduler->OnHeartbeat(conn, hb);
        break;
      }
      case 6:
        (void)scheduler->Cancel(JobId(in), Text(in, 32));
        break;
      case 7: {
        auto sink = std::make_shared<Sink>();
        sinks.push_back(sink);
        (void)scheduler->Watch(JobId(in), Number(in), sink);
        break;
      }
      case 8: {
        v1::Drain d;
        d.set_reason(Text(in, 16));
        (void)scheduler->OnDrain(conn, d);
        break;
      }
      case 9:
        scheduler->Disconnect(conn, Text(in, 16));
        connections.erase(conn);
        break;
      case 10:
        clock.Advance(absl::Seconds(in.ConsumeIntegralInRange<int>(0, 120)));
        scheduler->Tick();
        break;
      case 11: {
        // A compile task's answer: one sent to some worker (maybe another's, or answered
        // already), or a made-up one.
        v1::CompileTaskResult r;
        std::vector<std::pair<uint64_t, std::string>> sent;
        for (const auto& [id, c] : connections)
          for (const auto& t : c->compile_tasks) sent.push_back({id, t});
        uint64_t from = conn;
        if (!sent.empty() && in.ConsumeBool()) {
          const auto& pick = sent[in.ConsumeIntegralInRange<size_t>(0, sent.size() - 1)];
          r.set_task_id(pick.second);
          if (in.ConsumeBool()) from = pick.first;
        } else {
          r.set_task_id(Text(in, 32));
        }
        r.mutable_result()->set_status(
            static_cast<v1::Status>(in.ConsumeIntegralInRange<int>(-1, 13)));
        (void)scheduler->OnCompileResult(from, r);
        break;
      }
      case 12: {
        // A Check with compile: it takes a compile slot beside the jobs.
        v1::EvalSpec spec;
        spec.set_problem_id(1);
        spec.set_world_size(static_cast<int32_t>(in.ConsumeIntegralInRange<int>(1, 2)));
        const char* classes[] = {"h200", "cpu", "any"};
        spec.set_gpu_class(in.PickValueInArray(classes));
        scheduler->StartCompile(spec, Text(in, 64), [](CompileAnswer) {});
        break;
      }
    }
  }
};

}  // namespace
}  // namespace pkb

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pkb;
  static const ProblemCatalogIndex* catalog = [] {
    spdlog::set_level(spdlog::level::off);  // the scheduler logs every connect
    auto c = ProblemCatalogIndex::FromJson(kCatalog);
    if (!c.ok()) Fail("the fuzzer's catalog does not load");
    return new ProblemCatalogIndex(std::move(*c));
  }();
  FuzzedDataProvider in(data, size);
  Script s;
  auto store = SqliteJobStore::Open(":memory:");
  if (!store.ok()) Fail("cannot open an in-memory store");
  s.store = std::move(*store);
  SchedulerOptions options;
  options.harness_version = "h1";
  options.lease_timeout = absl::Seconds(10);
  options.max_attempts = 2;
  options.secret_set_offset = in.ConsumeBool() ? 12345 : 0;
  s.scheduler = std::make_unique<Scheduler>(s.store.get(), &s.clock, catalog, options);
  for (int step = 0; step < 48 && in.remaining_bytes() > 0; ++step) s.Step(in, *catalog);
  s.scheduler->Flush();
  for (const auto& id : s.job_ids) {
    auto job = s.scheduler->Get(id);
    if (!job.ok()) Fail("accepted job " + id + " is lost: " + std::string(job.status().message()));
    if (job->stage() == v1::DONE && !job->has_result())
      Fail("job " + id + " is DONE without a result");
  }
  s.scheduler.reset();  // before the store it writes to
  return 0;
}
