// The scheduler tests' fixture: a fake clock, a real SQLite store in a temp dir, a small catalog,
// and recording test doubles for worker connections and watchers (no gRPC). Test code only.
#ifndef PKB_SERVER_SCHEDULER_FIXTURE_H_
#define PKB_SERVER_SCHEDULER_FIXTURE_H_

#include <catch2/catch.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/files.h"
#include "server/scheduler.h"
#include "server/sqlite_job_store.h"

namespace pkb {
namespace testing {

inline const char* const kCatalog =
    R"({"problems":[{"id":1,"slug":"1_allreduce","version":1,"defaultM":64,"defaultN":64,
  "defaultDtype":"bfloat16","layouts":[{"worldSize":1,"supported":true},{"worldSize":2,"supported":true},
  {"worldSize":3,"supported":false,"unsupportedReason":"m must divide by the world size"},
  {"worldSize":8,"supported":true}]},
  {"id":2,"slug":"2_shaped","version":1,"defaultM":64,"defaultN":64,"defaultDtype":"bfloat16",
  "layouts":[{"worldSize":2,"supported":true,"rankedShapes":{"mMin":32,"mMax":128,"mStep":8,
  "nMin":64,"nMax":64,"nStep":1}}]},
  {"id":3,"slug":"3_one_shape","version":1,"defaultM":64,"defaultN":64,"defaultDtype":"bfloat16",
  "layouts":[{"worldSize":2,"supported":true,"rankedShapes":{"mMin":64,"mMax":64,"mStep":1,
  "nMin":64,"nMax":64,"nStep":1}}]}]})";

// TEST DOUBLE: records what the scheduler sends to one worker.
struct RecordingConnection : WorkerConnection {
  void Send(const v1::CoordinatorMessage& m) override { sent.push_back(m); }
  void Close(const absl::Status& s) override { closed = s; }
  std::vector<v1::Lease> Leases() const {
    std::vector<v1::Lease> out;
    for (const auto& m : sent) {
      if (m.has_lease()) out.push_back(m.lease());
    }
    return out;
  }
  std::vector<v1::CoordinatorMessage> sent;
  std::optional<absl::Status> closed;
};

// TEST DOUBLE: records the events a watcher receives.
struct RecordingSink : EventSink {
  void OnEvent(const v1::EvalEvent& e) override { events.push_back(e); }
  std::vector<v1::EvalEvent> events;
};

struct Fixture {
  Fixture() : clock(absl::FromUnixSeconds(1'000'000)) {
    dir = *MakeTempDir("/tmp", "pkb-sched-test");
    store = *SqliteJobStore::Open(dir + "/jobs.db");
    catalog = std::make_unique<ProblemCatalogIndex>(*ProblemCatalogIndex::FromJson(kCatalog));
    options.harness_version = "h1";
    options.lease_timeout = absl::Seconds(10);
    options.max_attempts = 2;
    scheduler = std::make_unique<Scheduler>(store.get(), &clock, catalog.get(), options);
  }
  ~Fixture() { RemoveTree(dir).IgnoreError(); }

  std::shared_ptr<RecordingConnection> AddWorker(uint64_t conn, const std::string& id,
                                                 int max_w = 8,
                                                 const std::string& gpu_class = "h200",
                                                 int max_functional_w = 0) {
    auto c = std::make_shared<RecordingConnection>();
    v1::Register reg;
    reg.set_worker_id(id);
    reg.set_healthy(true);
    reg.mutable_capabilities()->set_gpu_class(gpu_class);
    reg.mutable_capabilities()->set_max_world_size(max_w);
    reg.mutable_capabilities()->set_gpu_count(max_w);
    reg.mutable_capabilities()->set_max_functional_world_size(max_functional_w);
    reg.mutable_capabilities()->set_harness_version("h1");
    REQUIRE(scheduler->Connect(conn, reg, c).ok());
    scheduler->Flush();  // worker-stream calls do not wait for the store
    return c;
  }
  static v1::SubmitRequest Request(const std::string& source, int w = 2) {
    v1::SubmitRequest r;
    r.set_problem_id(1);
    r.set_world_size(w);
    r.set_source(source);
    return r;
  }
  void SendDone(uint64_t conn, const v1::Lease& lease, v1::Status status) {
    v1::JobEvent je;
    je.set_job_id(lease.job_id());
    je.set_attempt(lease.attempt());
    je.mutable_event()->set_stage(v1::DONE);
    je.mutable_event()->mutable_result()->set_status(status);
    je.mutable_event()->mutable_result()->set_message("done");
    REQUIRE(scheduler->OnJobEvent(conn, je).ok());
    scheduler->Flush();  // worker-stream calls do not wait for the store
  }

  std::string dir;
  FakeClock clock;
  std::unique_ptr<SqliteJobStore> store;
  std::unique_ptr<ProblemCatalogIndex> catalog;
  SchedulerOptions options;
  std::unique_ptr<Scheduler> scheduler;
};

// Registers a worker that takes compile tasks (`slots` of them at once).
inline std::shared_ptr<RecordingConnection> AddCompiler(Fixture& f, uint64_t conn,
                                                        const std::string& id,
                                                        const std::string& gpu_class, int slots) {
  auto c = std::make_shared<RecordingConnection>();
  v1::Register reg;
  reg.set_worker_id(id);
  reg.set_healthy(true);
  reg.mutable_capabilities()->set_gpu_class(gpu_class);
  reg.mutable_capabilities()->set_max_world_size(1);
  reg.mutable_capabilities()->set_harness_version("h1");
  reg.mutable_capabilities()->set_compile_slots(slots);
  REQUIRE(f.scheduler->Connect(conn, reg, c).ok());
  return c;
}

inline std::vector<v1::CompileTask> Tasks(const RecordingConnection& c) {
  std::vector<v1::CompileTask> out;
  for (const auto& m : c.sent) {
    if (m.has_compile()) out.push_back(m.compile());
  }
  return out;
}

}  // namespace testing
}  // namespace pkb

#endif  // PKB_SERVER_SCHEDULER_FIXTURE_H_
