// The service's end-to-end tests' fixture: a coordinator, workers and the CLI as real processes
// on loopback, SQLite in a temp dir (cluster.cc). The tests, by feature: service_test.cc (jobs:
// submission, streams, cancel, dedup, restarts, workers, limits), service_auth_test.cc (tokens,
// TLS, tenants, worker tokens), service_cli_test.cc, service_leaderboard_test.cc (boards,
// confirmation and shape runs), service_check_test.cc (Check, practice runs, compile tasks).
#ifndef PKB_TESTS_SERVICE_CLUSTER_H_
#define PKB_TESTS_SERVICE_CLUSTER_H_

#include <fcntl.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/files.h"
#include "common/subprocess.h"
#include "pkb/v1/admin.grpc.pb.h"
#include "pkb/v1/evaluation.grpc.pb.h"
#include "pkb/v1/leaderboard.grpc.pb.h"
#include "tests/postgres/test_database.h"
#include "tests/service/child_process.h"

namespace pkb {
namespace service_test {

using Process = ChildProcess;

// The file's contents, or "" where it cannot be read.
std::string Slurp(const std::string& path);

// A coordinator on a temp SQLite file (or the `store` set before it starts), restartable on the
// same port and store.
struct Cluster {
  Cluster() {
    dir = *MakeTempDir("/tmp", "pkb-svc-test");
    store = dir + "/jobs.db";
    // The engine's sandbox uid passes through to the workers' scratch (docs/operations.md).
    std::filesystem::permissions(dir, std::filesystem::perms(0711));
  }
  ~Cluster() {
    workers.clear();
    coordinator.reset();
    if (!::getenv("PKB_KEEP_TEST_DIR")) RemoveTree(dir).IgnoreError();
  }

  void StartCoordinator(const std::string& engine, std::vector<std::string> extra = {}) {
    engine_ = engine;
    std::string listen = port ? absl::StrCat("127.0.0.1:", port) : "127.0.0.1:0";
    unlink((dir + "/port").c_str());
    std::vector<std::string> argv{PKB_COORDINATOR_BIN,
                                  "--listen",
                                  listen,
                                  "--store",
                                  store,
                                  "--engine",
                                  engine,
                                  "--heartbeat-interval",
                                  "0.2",
                                  "--lease-timeout",
                                  lease_timeout,
                                  "--max-attempts",
                                  "3",
                                  "--port-file",
                                  dir + "/port"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    coordinator = std::make_unique<Process>(argv, dir + "/coordinator.log");
    // 30 s: on a loaded 2-core machine (a chaos test beside it) a start has taken more than 6.
    for (int i = 0; i < 1500 && Slurp(dir + "/port").empty(); ++i)
      absl::SleepFor(absl::Milliseconds(20));
    port = std::atoi(Slurp(dir + "/port").c_str());
    REQUIRE(port > 0);
    channel =
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
    stub = v1::Evaluation::NewStub(channel);
  }
  Process* StartWorker(const std::string& id, std::map<std::string, std::string> env = {},
                       std::vector<std::string> extra = {}) {
    env["FAKE_PKB_EVAL_LOG"] = dir + "/engine_runs.log";
    std::vector<std::string> argv{PKB_WORKER_BIN,
                                  "--coordinator",
                                  absl::StrCat("127.0.0.1:", port),
                                  "--worker-id",
                                  id,
                                  "--engine",
                                  engine_,
                                  "--scratch",
                                  dir,
                                  "--gpu-class",
                                  "cpu"};
    // The worker's default follows the machine's CPUs; the tests' expectations do not.
    if (std::find(extra.begin(), extra.end(), "--compile-slots") == extra.end()) {
      argv.insert(argv.end(), {"--compile-slots", "2"});
    }
    argv.insert(argv.end(), extra.begin(), extra.end());
    workers.push_back(std::make_unique<Process>(argv, dir + "/worker-" + id + ".log", env));
    return workers.back().get();
  }
  std::string WriteSource(const std::string& name, const std::string& text) {
    std::string path = dir + "/" + name;
    REQUIRE(WriteFileAtomic(path, text).ok());
    return path;
  }
  v1::SubmitRequest Request(const std::string& source, int w = 2) {
    v1::SubmitRequest r;
    r.set_problem_id(1);
    r.set_world_size(w);
    r.set_source(source);
    return r;
  }

  std::string dir;
  std::string store;
  std::string lease_timeout = "1.5";  // seconds
  int port = 0;
  std::string engine_;
  std::unique_ptr<Process> coordinator;
  std::vector<std::unique_ptr<Process>> workers;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Evaluation::Stub> stub;
};

// Reads a stream to its end; stops early after `max_events`.
std::vector<v1::EvalEvent> ReadAll(grpc::ClientReader<v1::EvalEvent>* reader, grpc::Status* status,
                                   size_t max_events = 1000);
// Watch from `after` to the job's end.
std::vector<v1::EvalEvent> Watch(Cluster& c, const std::string& job_id, grpc::Status* status,
                                 int64_t after = 0);
// Follows a result's confirmation run to its end (as `token`, when given); its DONE event. Tests
// that count engine runs wait for it, since the run the coordinator adds ends on its own time.
v1::EvalEvent AwaitConfirmation(Cluster& c, const v1::EvalResult& result,
                                const std::string& token = "");
// How many runs the engine (the test double) logged.
size_t EngineRuns(Cluster& c);
void CheckSequence(const std::vector<v1::EvalEvent>& events);
// The real engine when built (or named by PKB_TEST_ENGINE), else the test double.
std::string Engine();
// A token's metadata on a fresh context.
std::unique_ptr<grpc::ClientContext> As(const std::string& token);
// Submits as `token` and reads the stream to its end.
std::vector<v1::EvalEvent> SubmitAs(Cluster& c, const std::string& token,
                                    const v1::SubmitRequest& r, grpc::Status* st);
// The first event of a submission (its job id), leaving the stream to run on in `reader`.
std::string FirstEvent(grpc::ClientReader<v1::EvalEvent>* reader);
// Waits until the coordinator's log says `what` (a worker connected), at most 30 s.
void AwaitLog(Cluster& c, const std::string& what);
// The source of tests/engine/cpu_candidates/`name`, made one file (a submission is one source).
std::string HostCandidate(const std::string& name);

}  // namespace service_test
}  // namespace pkb

#endif  // PKB_TESTS_SERVICE_CLUSTER_H_
