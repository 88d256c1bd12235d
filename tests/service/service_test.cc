// End-to-end: coordinator, workers and CLI as real processes on loopback, SQLite in a temp dir.
#include <fcntl.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

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
namespace {

using Process = ChildProcess;

std::string Slurp(const std::string& path) {
  auto s = ReadFile(path);
  return s.ok() ? *s : "";
}

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
    for (int i = 0; i < 300 && Slurp(dir + "/port").empty(); ++i)
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
                                   size_t max_events = 1000) {
  std::vector<v1::EvalEvent> events;
  v1::EvalEvent e;
  while (events.size() < max_events && reader->Read(&e)) events.push_back(e);
  if (events.size() < max_events) *status = reader->Finish();
  return events;
}

std::vector<v1::EvalEvent> Watch(Cluster& c, const std::string& job_id, grpc::Status* status,
                                 int64_t after = 0) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  v1::WatchRequest w;
  w.set_job_id(job_id);
  w.set_after_sequence(after);
  auto reader = c.stub->Watch(&ctx, w);
  return ReadAll(reader.get(), status);
}

// Follows a result's confirmation run to its end (as `token`, when given); its DONE event. Tests
// that count engine runs wait for it, since the run the coordinator adds ends on its own time.
v1::EvalEvent AwaitConfirmation(Cluster& c, const v1::EvalResult& result,
                                const std::string& token = "") {
  REQUIRE(!result.confirmation_job_id().empty());
  std::vector<v1::EvalEvent> events;
  grpc::Status st;
  // Reattached while the coordinator (just restarted) is unavailable, as a client does.
  for (int attempt = 0; attempt < 50; ++attempt) {
    grpc::ClientContext ctx;
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::WatchRequest w;
    w.set_job_id(result.confirmation_job_id());
    w.set_after_sequence(events.empty() ? 0 : events.back().sequence());
    auto reader = c.stub->Watch(&ctx, w);
    std::vector<v1::EvalEvent> more = ReadAll(reader.get(), &st);
    events.insert(events.end(), more.begin(), more.end());
    if (st.error_code() != grpc::StatusCode::UNAVAILABLE) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  INFO(st.error_message());
  REQUIRE(st.ok());
  REQUIRE(!events.empty());
  REQUIRE(events.back().stage() == v1::DONE);
  return events.back();
}

size_t EngineRuns(Cluster& c) {
  std::string runs = Slurp(c.dir + "/engine_runs.log");
  return std::count(runs.begin(), runs.end(), '\n');
}

void CheckSequence(const std::vector<v1::EvalEvent>& events) {
  for (size_t i = 0; i < events.size(); ++i) CHECK(events[i].sequence() == int64_t(i + 1));
}

// The real engine when built (or named by PKB_TEST_ENGINE), else the test double.
std::string Engine() {
  if (const char* e = std::getenv("PKB_TEST_ENGINE")) return e;
  return std::string(PKB_REAL_ENGINE).empty() ? PKB_FAKE_ENGINE : PKB_REAL_ENGINE;
}

TEST_CASE("submit streams every stage and the GPU-less verdict", "[service]") {
  Cluster c;
  c.StartCoordinator(Engine());
  c.StartWorker("w1");
  std::string example = std::string(PKB_EXAMPLES_DIR) + "/p001_allreduce_symm.cu";
  std::string source = ReadFile(example).value_or("__global__ void k() {}\n");
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(90));
  auto reader = c.stub->Submit(&ctx, c.Request(source, 2));
  grpc::Status st;
  auto events = ReadAll(reader.get(), &st);
  INFO(Slurp(c.dir + "/worker-w1.log"));
  REQUIRE(st.ok());
  REQUIRE(events.size() >= 3);
  CheckSequence(events);
  CHECK(events.front().stage() == v1::QUEUED);
  bool compiled = false;
  for (const auto& e : events) compiled |= e.stage() == v1::COMPILING;
  CHECK(compiled);
  const v1::EvalResult& r = events.back().result();
  CHECK(events.back().stage() == v1::DONE);
  // CI has no GPU: the engine compiles, then says so.
  CHECK(r.status() == v1::NO_DEVICE);
  CHECK(!r.job_key().empty());
}

// The key is hashed once, by the coordinator, from the completed spec; the engine reports the
// lease's. pkb-eval run by hand computes it with the same function, so the two agree.
TEST_CASE("the job key a standalone pkb-eval reports is the coordinator's", "[service]") {
  if (Engine() == PKB_FAKE_ENGINE) {
    WARN("pkb-eval is not built: nothing to compare the coordinator's key with");
    return;
  }
  Cluster c;
  c.StartCoordinator(Engine());
  c.StartWorker("w1");
  const std::string example = std::string(PKB_EXAMPLES_DIR) + "/p001_allreduce_symm.cu";
  const std::string source = ReadFile(example).value_or("__global__ void k() {}\n");
  // Through the spec, a default given explicitly: it keys as the default left out.
  v1::SubmitRequest req;
  req.set_source(source);
  req.mutable_spec()->set_problem_id(1);
  req.mutable_spec()->set_world_size(2);
  req.mutable_spec()->set_trials(5);
  req.mutable_spec()->set_dtype("bf16");
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(90));
  auto reader = c.stub->Submit(&ctx, req);
  grpc::Status st;
  auto events = ReadAll(reader.get(), &st);
  REQUIRE(st.ok());
  REQUIRE(events.back().stage() == v1::DONE);
  const std::string engine_key = events.back().result().job_key();
  v1::GetJobRequest g;
  g.set_job_id(events.front().job_id());
  v1::Job job;
  grpc::ClientContext gctx;
  REQUIRE(c.stub->Get(&gctx, g, &job).ok());
  CHECK(job.request().spec().warmup() == 500);  // completed by the coordinator
  CHECK(job.request().world_size() == 2);       // and mirrored for clients of before
  CHECK(engine_key == job.job_key());

  SubprocessOptions o;
  o.argv = {Engine(), "-p", "1", "-w", "2", "--json", "--scratch", c.dir, example};
  o.timeout = absl::Seconds(120);
  auto run = RunSubprocess(o);
  REQUIRE(run.ok());
  INFO(run->out << run->err);
  const std::string field = "\"job_key\": \"";
  const size_t at = run->out.find(field);
  REQUIRE(at != std::string::npos);
  const std::string standalone = run->out.substr(at + field.size(), 64);
  CHECK(standalone == job.job_key());
}

TEST_CASE("rejections are precise: unknown problem, unsupported world size", "[service]") {
  Cluster c;
  c.StartCoordinator(PKB_FAKE_ENGINE);
  grpc::Status st;
  {
    grpc::ClientContext ctx;
    auto r = c.Request("x", 3);
    auto reader = c.stub->Submit(&ctx, r);
    ReadAll(reader.get(), &st);
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(st.error_message().find("m must divide") != std::string::npos);
  }
  {
    grpc::ClientContext ctx;
    auto r = c.Request("x", 2);
    r.set_problem_id(999);
    auto reader = c.stub->Submit(&ctx, r);
    ReadAll(reader.get(), &st);
    CHECK(st.error_code() == grpc::StatusCode::NOT_FOUND);
  }
  Watch(c, "no-such-job", &st);
  CHECK(st.error_code() == grpc::StatusCode::NOT_FOUND);
}

TEST_CASE("a client that drops its stream reattaches with Watch and sees the whole history",
          "[service]") {
  Cluster c;
  c.StartCoordinator(PKB_FAKE_ENGINE);
  c.StartWorker("w1", {{"FAKE_PKB_EVAL_DELAY", "0.2"}});
  std::string job_id;
  {
    grpc::ClientContext ctx;
    auto reader = c.stub->Submit(&ctx, c.Request("FAKE_OK"));
    grpc::Status st;
    auto first = ReadAll(reader.get(), &st, 1);
    REQUIRE(first.size() == 1);
    job_id = first[0].job_id();
    ctx.TryCancel();  // the client goes away mid-job
  }
  grpc::Status st;
  auto events = Watch(c, job_id, &st);
  REQUIRE(st.ok());
  CheckSequence(events);
  REQUIRE(events.size() >= 9);  // QUEUED, leased, COMPILING, 5 x VERIFYING, BENCHMARKING, DONE
  CHECK(events.back().result().status() == v1::OK);
  auto tail = Watch(c, job_id, &st, events.size() - 2);
  CHECK(tail.size() == 2);
}

TEST_CASE("cancel kills the running evaluation and ends the job CANCELLED", "[service]") {
  Cluster c;
  c.StartCoordinator(PKB_FAKE_ENGINE);
  c.StartWorker("w1");
  grpc::ClientContext ctx;
  auto reader = c.stub->Submit(&ctx, c.Request("FAKE_HANG"));
  v1::EvalEvent e;
  std::string job_id;
  while (reader->Read(&e)) {
    job_id = e.job_id();
    if (e.stage() == v1::COMPILING) break;
  }
  REQUIRE(e.stage() == v1::COMPILING);
  absl::SleepFor(absl::Milliseconds(200));
  grpc::ClientContext cctx;
  v1::CancelRequest cr;
  cr.set_job_id(job_id);
  v1::Job job;
  REQUIRE(c.stub->Cancel(&cctx, cr, &job).ok());
  CHECK(job.result().status() == v1::CANCELLED);
  grpc::Status st;
  auto rest = ReadAll(reader.get(), &st);
  REQUIRE(!rest.empty());
  CHECK(rest.back().result().status() == v1::CANCELLED);
  // The engine's process group is gone.
  std::string runs = Slurp(c.dir + "/engine_runs.log");
  int pid = std::atoi(runs.substr(runs.find("pid=") + 4).c_str());
  REQUIRE(pid > 0);
  bool gone = false;
  for (int i = 0; i < 250 && !gone; ++i) {
    // Gone, or a zombie waiting for init to reap it (it no longer runs either way).
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    gone = !std::getline(stat, line) || line[line.rfind(')') + 2] == 'Z';
    absl::SleepFor(absl::Milliseconds(20));
  }
  CHECK(gone);
  // The worker is free again.
  grpc::ClientContext ctx2;
  auto r2 = c.stub->Submit(&ctx2, c.Request("after cancel"));
  auto events = ReadAll(r2.get(), &st);
  REQUIRE(st.ok());
  CHECK(events.back().result().status() == v1::NO_DEVICE);
}

TEST_CASE("identical submissions are deduplicated in flight and cached once done", "[service]") {
  Cluster c;
  c.StartCoordinator(PKB_FAKE_ENGINE);
  c.StartWorker("w1", {{"FAKE_PKB_EVAL_DELAY", "0.1"}});
  std::vector<std::string> ids(3);
  std::vector<v1::EvalResult> results(3);
  std::vector<std::thread> clients;
  for (int i = 0; i < 3; ++i) {
    clients.emplace_back([&, i] {
      grpc::ClientContext ctx;
      auto reader = c.stub->Submit(&ctx, c.Request("FAKE_OK same"));
      grpc::Status st;
      auto events = ReadAll(reader.get(), &st);
      if (!events.empty() && events.back().result().status() == v1::OK) {
        ids[i] = events.front().job_id();
        results[i] = events.back().result();
      }
    });
  }
  for (auto& t : clients) t.join();
  CHECK(!ids[0].empty());
  CHECK(ids[0] == ids[1]);
  CHECK(ids[1] == ids[2]);
  grpc::ClientContext ctx;
  auto reader = c.stub->Submit(&ctx, c.Request("FAKE_OK same"));
  grpc::Status st;
  auto events = ReadAll(reader.get(), &st);
  REQUIRE(events.size() == 2);
  CHECK(events.back().result().cached());
  CHECK(events.back().result().status() == v1::OK);
  CHECK(events.back().result().confirmation_job_id().empty());  // a copy: the original's
  // One evaluation, and its confirmation run.
  CHECK(AwaitConfirmation(c, results[0]).result().status() == v1::OK);
  CHECK(EngineRuns(c) == 2);
}

// Submits, kills the coordinator (kill -9) mid-job and starts it again on the same port and store;
// the job then completes with its whole history. The events it streamed, in order.
std::vector<v1::EvalEvent> CoordinatorRestart(Cluster& c) {
  // The worker must be back before its lease expires: its reconnect backoff (and gRPC's) took
  // several seconds on the shared VM under load, past the 1.5 s the other cases use.
  c.lease_timeout = "10";
  c.StartCoordinator(PKB_FAKE_ENGINE);
  c.StartWorker("w1", {{"FAKE_PKB_EVAL_DELAY", "0.4"}});
  std::string job_id;
  {
    grpc::ClientContext ctx;
    auto reader = c.stub->Submit(&ctx, c.Request("FAKE_OK restart"));
    v1::EvalEvent e;
    while (reader->Read(&e) && e.stage() != v1::VERIFYING) job_id = e.job_id();
    REQUIRE(e.stage() == v1::VERIFYING);
    c.coordinator->Kill(SIGKILL);
  }
  c.StartCoordinator(PKB_FAKE_ENGINE);  // same port, same store
  grpc::Status st;
  auto events = Watch(c, job_id, &st);
  INFO(Slurp(c.dir + "/coordinator.log"));
  REQUIRE(st.ok());
  CheckSequence(events);
  CHECK(events.back().result().status() == v1::OK);
  CHECK(Slurp(c.dir + "/coordinator.log").find("recovered 1 unfinished jobs") != std::string::npos);
  return events;
}

TEST_CASE("kill -9 of the coordinator mid-job: after a restart the job completes", "[service]") {
  Cluster c;
  std::vector<v1::EvalEvent> events = CoordinatorRestart(c);
  INFO(Slurp(c.dir + "/coordinator.log"));
  // The worker kept running it and resumed its lease: the engine ran once, and once more for the
  // confirmation run its OK verdict queued.
  CHECK(AwaitConfirmation(c, events.back().result()).result().status() == v1::OK);
  CHECK(EngineRuns(c) == 2);
  CHECK(Slurp(c.dir + "/coordinator.log").find("resumed job") != std::string::npos);
}

TEST_CASE("postgresql store: kill -9 of the coordinator mid-job, the restarted one completes it",
          "[service][postgresql]") {
  if (std::string why = PostgresSkipReason(); !why.empty()) {
    WARN(why);
    return;
  }
  absl::StatusOr<std::unique_ptr<TestDatabase>> db = TestDatabase::Create();
  REQUIRE(db.ok());
  Cluster c;
  c.store = (*db)->uri();
  std::vector<v1::EvalEvent> events = CoordinatorRestart(c);
  CHECK(Slurp(c.dir + "/coordinator.log").find("store postgresql://") != std::string::npos);
  v1::EvalEvent confirmed = AwaitConfirmation(c, events.back().result());
  // Nothing lost and nothing twice: one job and its confirmation run, DONE, and every event
  // streamed is a row. (Whether the worker resumed its lease or the job ran again is the worker's
  // part, checked on SQLite above.)
  CHECK(*(*db)->QueryInt("SELECT count(*) FROM jobs") == 2);
  CHECK(*(*db)->QueryInt("SELECT count(*) FROM jobs WHERE done") == 2);
  CHECK(*(*db)->QueryInt("SELECT count(*) FROM jobs WHERE confirms <> '' AND NOT cacheable") == 1);
  CHECK(*(*db)->QueryInt("SELECT count(*) FROM events") ==
        static_cast<int64_t>(events.size() + confirmed.sequence()));
}

TEST_CASE("kill -9 of a worker mid-job: the job is leased again to another worker", "[service]") {
  Cluster c;
  c.StartCoordinator(PKB_FAKE_ENGINE);
  Process* first = c.StartWorker("w1", {{"FAKE_PKB_EVAL_DELAY", "0.3"}});
  grpc::ClientContext ctx;
  auto reader = c.stub->Submit(&ctx, c.Request("FAKE_OK killed"));
  v1::EvalEvent e;
  while (reader->Read(&e) && e.stage() != v1::COMPILING) {
  }
  REQUIRE(e.stage() == v1::COMPILING);
  c.StartWorker("w2", {{"FAKE_PKB_EVAL_DELAY", "0.05"}});
  first->Kill(SIGKILL);
  grpc::Status st;
  auto rest = ReadAll(reader.get(), &st);
  REQUIRE(st.ok());
  CHECK(rest.back().result().status() == v1::OK);
  CHECK(rest.back().attempt() == 2);
  bool requeued = false, to_w2 = false;
  for (const auto& ev : rest) {
    requeued |= ev.message().find("back in the queue") != std::string::npos;
    to_w2 |= ev.message().find("leased to worker w2") != std::string::npos;
  }
  CHECK(requeued);
  CHECK(to_w2);
}

// This worker's scratch folders (pkb-worker-<id>-XXXXXX) under the cluster's scratch folder.
std::vector<std::string> WorkerFolders(const Cluster& c, const std::string& id) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(c.dir)) {
    if (e.path().filename().string().rfind("pkb-worker-" + id + "-", 0) == 0)
      out.push_back(e.path().string());
  }
  return out;
}

TEST_CASE("a worker at start removes what a killed worker left, never a live one's folders",
          "[service]") {
  Cluster c;
  c.StartCoordinator(PKB_FAKE_ENGINE);
  Process* first = c.StartWorker("w1");
  grpc::ClientContext ctx;
  auto reader = c.stub->Submit(&ctx, c.Request("FAKE_HANG scratch"));
  v1::EvalEvent e;
  while (reader->Read(&e) && e.stage() != v1::COMPILING) {
  }
  REQUIRE(e.stage() == v1::COMPILING);
  std::vector<std::string> left = WorkerFolders(c, "w1");
  REQUIRE(left.size() == 1);
  bool job_folder = false;
  for (const auto& j : std::filesystem::directory_iterator(left[0]))
    job_folder |= j.path().filename().string().rfind("job-", 0) == 0;
  CHECK(job_folder);  // the running job's folder, with its candidate.cu
  first->Kill(SIGKILL);
  c.StartWorker("w2");  // lives on
  for (int i = 0; i < 250 && WorkerFolders(c, "w2").empty(); ++i)
    absl::SleepFor(absl::Milliseconds(20));
  REQUIRE(WorkerFolders(c, "w2").size() == 1);
  CHECK(!std::filesystem::exists(left[0]));  // w2 found w1 dead and removed its folder
  const std::string live = WorkerFolders(c, "w2")[0];
  c.StartWorker("w3");
  for (int i = 0; i < 250 && WorkerFolders(c, "w3").empty(); ++i)
    absl::SleepFor(absl::Milliseconds(20));
  REQUIRE(WorkerFolders(c, "w3").size() == 1);
  CHECK(std::filesystem::exists(live));  // w2 lives: its folder stays
  INFO(Slurp(c.dir + "/worker-w2.log"));
  CHECK(Slurp(c.dir + "/worker-w2.log").find("left by a dead worker") != std::string::npos);
}

TEST_CASE("a draining worker finishes its job and leaves", "[service]") {
  Cluster c;
  c.StartCoordinator(PKB_FAKE_ENGINE);
  Process* w = c.StartWorker("w1", {{"FAKE_PKB_EVAL_DELAY", "0.2"}});
  grpc::ClientContext ctx;
  auto reader = c.stub->Submit(&ctx, c.Request("FAKE_OK drain"));
  v1::EvalEvent e;
  while (reader->Read(&e) && e.stage() != v1::COMPILING) {
  }
  w->Signal(SIGTERM);  // asks for a drain: no new job, the running one completes
  grpc::Status st;
  auto rest = ReadAll(reader.get(), &st);
  CHECK(rest.back().result().status() == v1::OK);
  CHECK(w->WaitExit(absl::Seconds(10)));
}

TEST_CASE("tokens: roles decide who may call what, submissions are rate-limited per token",
          "[service][auth]") {
  Cluster c;
  std::string tokens = c.WriteSource("tokens",
                                     "# token role name\nagent-tok agent alice\nworker-tok worker "
                                     "w1 gpu_class=cpu max_world_size=8\n");
  std::string worker_token = c.WriteSource("worker.token", "worker-tok\n");
  c.StartCoordinator(PKB_FAKE_ENGINE,
                     {"--tokens", tokens, "--submit-rate", "0.001", "--submit-burst", "2"});
  c.StartWorker("w1", {}, {"--token-file", worker_token});
  auto submit = [&](const std::string& token, const std::string& source,
                    std::vector<v1::EvalEvent>* events) {
    grpc::ClientContext ctx;
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    auto reader = c.stub->Submit(&ctx, c.Request(source));
    grpc::Status st;
    *events = ReadAll(reader.get(), &st);
    return st.error_code();
  };
  std::vector<v1::EvalEvent> events;
  CHECK(submit("", "a", &events) == grpc::StatusCode::UNAUTHENTICATED);
  CHECK(submit("nope", "a", &events) == grpc::StatusCode::UNAUTHENTICATED);
  CHECK(submit("worker-tok", "a", &events) == grpc::StatusCode::PERMISSION_DENIED);
  REQUIRE(submit("agent-tok", "a", &events) == grpc::StatusCode::OK);
  CHECK(events.back().result().status() == v1::NO_DEVICE);  // the worker's token let it in
  grpc::ClientContext gctx;
  gctx.AddMetadata("authorization", "Bearer agent-tok");
  v1::GetJobRequest g;
  g.set_job_id(events.back().job_id());
  v1::Job job;
  REQUIRE(c.stub->Get(&gctx, g, &job).ok());
  CHECK(job.request().submitter() == "alice");
  CHECK(submit("agent-tok", "b", &events) == grpc::StatusCode::OK);
  CHECK(submit("agent-tok", "c", &events) ==
        grpc::StatusCode::RESOURCE_EXHAUSTED);  // burst of 2 spent
  SubprocessOptions o;
  o.argv = {PKB_CLI_BIN, "--coordinator", absl::StrCat("127.0.0.1:", c.port), "get", "x"};
  CHECK(RunSubprocess(o)->exit_code == 6);
}

TEST_CASE("TLS: worker and CLI reach a TLS coordinator, plaintext does not", "[service][tls]") {
  Cluster c;
  SubprocessOptions gen;
  gen.argv = {"openssl",  "req",
              "-x509",    "-newkey",
              "rsa:2048", "-nodes",
              "-days",    "1",
              "-subj",    "/CN=localhost",
              "-addext",  "subjectAltName=IP:127.0.0.1,DNS:localhost",
              "-keyout",  c.dir + "/key.pem",
              "-out",     c.dir + "/cert.pem"};
  gen.merge_stderr = true;
  auto made = RunSubprocess(gen);
  REQUIRE(made.ok());
  INFO(made->out);
  REQUIRE(made->exit_code == 0);
  c.StartCoordinator(PKB_FAKE_ENGINE,
                     {"--tls-cert", c.dir + "/cert.pem", "--tls-key", c.dir + "/key.pem"});
  c.StartWorker("w1", {}, {"--tls-ca", c.dir + "/cert.pem"});
  auto run = [&](std::vector<std::string> args) {
    SubprocessOptions o;
    o.argv = {PKB_CLI_BIN, "--coordinator", absl::StrCat("127.0.0.1:", c.port), "--connect-timeout",
              "3"};
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.timeout = absl::Seconds(60);
    return RunSubprocess(o).value();
  };
  std::string src = c.WriteSource("tls.cu", "plain");
  auto ok = run({"--tls-ca", c.dir + "/cert.pem", "submit", src, "-p", "1", "-w", "2"});
  INFO(ok.out + ok.err);
  CHECK(ok.exit_code == 17);  // NO_DEVICE: it went all the way through the worker
  CHECK(run({"problems", "list"}).exit_code == 3);
}

TEST_CASE("a worker whose health check fails after a job takes no more jobs", "[service]") {
  Cluster c;
  c.StartCoordinator(PKB_FAKE_ENGINE);
  c.StartWorker("sick", {}, {"--health-check", "echo GPU fell off the bus; exit 1"});
  auto submit = [&](const std::string& source, size_t max_events) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    auto reader = c.stub->Submit(&ctx, c.Request(source));
    grpc::Status st;
    auto events = ReadAll(reader.get(), &st, max_events);
    ctx.TryCancel();
    return events;
  };
  auto first = submit("first", 1000);
  REQUIRE(!first.empty());
  CHECK(first.back().result().status() == v1::NO_DEVICE);  // the job itself is fine
  auto second = submit("second", 1);
  REQUIRE(second.size() == 1);
  absl::SleepFor(absl::Seconds(1));
  grpc::ClientContext gctx;
  v1::GetJobRequest g;
  g.set_job_id(second[0].job_id());
  v1::Job job;
  REQUIRE(c.stub->Get(&gctx, g, &job).ok());
  CHECK(job.stage() == v1::QUEUED);
  CHECK(job.attempts() == 0);
  CHECK(Slurp(c.dir + "/worker-sick.log").find("GPU fell off the bus") != std::string::npos);
}

TEST_CASE("grpc.health.v1 answers SERVING", "[service]") {
  Cluster c;
  c.StartCoordinator(PKB_FAKE_ENGINE);
  grpc::GenericStub generic(c.channel);
  grpc::ClientContext ctx;
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1), response;
  std::promise<grpc::Status> done;
  generic.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                    [&](grpc::Status st) { done.set_value(st); });
  REQUIRE(done.get_future().get().ok());
  std::vector<grpc::Slice> slices;
  REQUIRE(response.Dump(&slices).ok());
  std::string bytes;
  for (auto& sl : slices)
    bytes += std::string(reinterpret_cast<const char*>(sl.begin()), sl.size());
  CHECK(bytes == std::string("\x08\x01", 2));  // HealthCheckResponse{status: SERVING}
}

TEST_CASE("the CLI's exit codes follow the verdict", "[service][cli]") {
  Cluster c;
  c.StartCoordinator(PKB_FAKE_ENGINE);
  c.StartWorker("w1");
  auto run = [&](std::vector<std::string> args) {
    SubprocessOptions o;
    o.argv = {PKB_CLI_BIN, "--coordinator", absl::StrCat("127.0.0.1:", c.port)};
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.timeout = absl::Seconds(60);
    return RunSubprocess(o).value();
  };
  CHECK(run({"submit", c.WriteSource("ok.cu", "FAKE_OK"), "-p", "1", "-w", "2"}).exit_code == 0);
  CHECK(run({"submit", c.WriteSource("ce.cu", "FAKE_COMPILE_ERROR"), "-p", "1", "-w", "2"})
            .exit_code == 10);
  auto nd = run({"--json", "submit", c.WriteSource("nd.cu", "plain"), "-p", "1", "-w", "2"});
  CHECK(nd.exit_code == 17);
  CHECK(nd.out.find("\"NO_DEVICE\"") != std::string::npos);
  CHECK(run({"submit", c.WriteSource("w3.cu", "x"), "-p", "1", "-w", "3"}).exit_code == 5);
  CHECK(run({"get", "nope"}).exit_code == 4);
  CHECK(run({"submit"}).exit_code == 2);
  CHECK(run({"problems", "list"}).out.find("1_allreduce") != std::string::npos);
  const std::string shown = run({"problems", "show", "1_allreduce"}).out;
  CHECK(shown.find("All-reduce") != std::string::npos);
  // The OK result above measured the reference (the test double's 15 us per call).
  CHECK(shown.find("W=2 cpu      median 15.00 us (p10 15.00, p90 15.00; 1 results)") !=
        std::string::npos);
  CHECK(shown.find("\"sources\"") == std::string::npos);  // the code is behind --source
  CHECK(run({"problems", "show", "1", "--source"}).out ==
        "// ==== problems/collectives/p001_allreduce.cc\n// the test double's problem 1\n");
  auto lb = run({"--json", "leaderboard"});
  CHECK(lb.exit_code == 0);
  CHECK(lb.out.find("\"speedup\":1.5") != std::string::npos);
  SubprocessOptions down;
  down.argv = {PKB_CLI_BIN, "--coordinator", "127.0.0.1:1", "--connect-timeout", "1", "get", "x"};
  CHECK(RunSubprocess(down)->exit_code == 3);
}

TEST_CASE("a C++ candidate from the CLI reaches a real verdict with timings on a cpu worker",
          "[service][cli]") {
  if (std::string(PKB_REAL_ENGINE).empty()) {
    WARN("pkb-eval is not built: a real verdict needs the real engine");
    return;
  }
  Cluster c;
  c.StartCoordinator(PKB_REAL_ENGINE);
  c.StartWorker("w1");  // gpu class cpu, the real engine
  // tests/engine/cpu_candidates/p001_correct.cc, made one file: a submission is one source.
  const std::string cpu_dir = std::string(PKB_SOURCE_DIR) + "/tests/engine/cpu_candidates/";
  std::string common = ReadFile(cpu_dir + "common.h").value();
  common.replace(common.find("#pragma once"), strlen("#pragma once"), "");
  std::string correct = ReadFile(cpu_dir + "p001_correct.cc").value();
  correct.replace(correct.find("#include \"common.h\""), strlen("#include \"common.h\""), common);
  const std::string file = c.WriteSource("p001_host.cc", correct);
  SubprocessOptions o;
  // No --language: the extension says cpp; no --gpu-class: the coordinator sends it to cpu.
  o.argv = {PKB_CLI_BIN,
            "--coordinator",
            absl::StrCat("127.0.0.1:", c.port),
            "submit",
            file,
            "-p",
            "1",
            "-w",
            "2",
            "--m",
            "64",
            "--n",
            "64",
            "--warmup",
            "3",
            "--iters",
            "8",
            "--min-window-ms",
            "0",
            "--no-cache"};
  o.timeout = absl::Seconds(100);
  SubprocessResult r = RunSubprocess(o).value();
  INFO(r.out << r.err << Slurp(c.dir + "/worker-w1.log"));
  CHECK(r.exit_code == 0);
  REQUIRE(r.out.rfind("job ", 0) == 0);
  v1::GetJobRequest get;
  get.set_job_id(r.out.substr(4, r.out.find('\n') - 4));
  grpc::ClientContext ctx;
  v1::Job job;
  REQUIRE(c.stub->Get(&ctx, get, &job).ok());
  CHECK(job.request().language() == "cpp");
  CHECK(job.gpu_class() == "cpu");
  const v1::EvalResult& res = job.result();
  INFO(res.message());
  CHECK(res.status() == v1::OK);
  CHECK(res.compile().ok());
  // --min-window-ms 0: exactly --iters calls per window (PKB's count), through the spec.
  CHECK(job.request().spec().min_window_ms() == 0);
  CHECK(job.request().spec().has_min_window_ms());
  CHECK(res.candidate().iterations() == 8);
  CHECK(res.baseline().iterations() == 8);
  CHECK(res.candidate().samples() == 8 * 5);  // the candidate in 5 rounds
  CHECK(res.candidate().round_wall_per_iter_us_size() == 5);
  CHECK(res.candidate().median_us() > 0);
  CHECK(res.candidate().wall_per_iter_us() > 0);
  CHECK(res.baseline().samples() == res.baseline().iterations() * 5);  // the reference in 5 rounds
  CHECK(res.speedup() > 0);
  // The same file as CUDA (--language cuda, the cache allowed) is another job: nvcc compiles it
  // and the GPU-less node answers NO_DEVICE; the cpp job's OK is not served from the cache.
  o.argv.back() = "--language";
  o.argv.push_back("cuda");
  SubprocessResult as_cuda = RunSubprocess(o).value();
  CHECK(as_cuda.out.find("cached") == std::string::npos);
  CHECK(as_cuda.exit_code != 0);
}

TEST_CASE("a functional run puts 4 ranks on a worker that takes 1 and never ranks",
          "[service][cli]") {
  if (std::string(PKB_REAL_ENGINE).empty()) {
    WARN("pkb-eval is not built: a real verdict needs the real engine");
    return;
  }
  Cluster c;
  c.StartCoordinator(PKB_REAL_ENGINE);
  c.StartWorker("w1", {}, {"--max-world-size", "1"});  // functional runs: up to 8 (the default)
  const std::string cpu_dir = std::string(PKB_SOURCE_DIR) + "/tests/engine/cpu_candidates/";
  std::string common = ReadFile(cpu_dir + "common.h").value();
  common.replace(common.find("#pragma once"), strlen("#pragma once"), "");
  std::string correct = ReadFile(cpu_dir + "p001_correct.cc").value();
  correct.replace(correct.find("#include \"common.h\""), strlen("#include \"common.h\""), common);
  const std::string file = c.WriteSource("p001_host.cc", correct);
  auto submit = [&](std::vector<std::string> more) {
    SubprocessOptions o;
    o.argv = {PKB_CLI_BIN,
              "--coordinator",
              absl::StrCat("127.0.0.1:", c.port),
              "submit",
              file,
              "-p",
              "1",
              "-w",
              "4",
              "--m",
              "64",
              "--n",
              "64",
              "--warmup",
              "3"};
    o.argv.insert(o.argv.end(), more.begin(), more.end());
    o.timeout = absl::Seconds(100);
    return RunSubprocess(o).value();
  };
  // W = 4 is beyond this worker: a plain run waits, and says what would run.
  SubprocessResult plain = submit({"--detach"});
  INFO(plain.out << plain.err);
  CHECK(plain.out.find("no connected worker can run it yet") != std::string::npos);
  CHECK(plain.out.find("a functional run") != std::string::npos);
  SubprocessResult r = submit({"--functional"});
  INFO(r.out << r.err << Slurp(c.dir + "/worker-w1.log"));
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("functional run: no speedup") != std::string::npos);
  REQUIRE(r.out.rfind("job ", 0) == 0);
  v1::GetJobRequest get;
  get.set_job_id(r.out.substr(4, r.out.find('\n') - 4));
  grpc::ClientContext ctx;
  v1::Job job;
  REQUIRE(c.stub->Get(&ctx, get, &job).ok());
  CHECK(job.request().functional());
  const v1::EvalResult& res = job.result();
  INFO(res.message());
  CHECK(res.status() == v1::OK);
  CHECK(res.functional());
  CHECK(res.world_size() == 4);
  CHECK(res.speedup() == 0);
  CHECK(res.candidate().samples() == 20);  // the functional window, not --iters' 100
  // Ranked and functional exclude each other.
  SubprocessResult both = submit({"--functional", "--ranked"});
  CHECK(both.exit_code != 0);
  CHECK(both.err.find("functional and ranked") != std::string::npos);
}

TEST_CASE("leaderboard over gRPC: metadata, secret seed, roles, history, export",
          "[service][leaderboard]") {
  Cluster c;
  std::string tokens = c.WriteSource("tokens",
                                     "ag-a agent alice\nag-b agent bob\nres researcher rita\n"
                                     "wk worker w1 gpu_class=cpu max_world_size=8\n");
  std::string worker_token = c.WriteSource("worker.token", "wk\n");
  std::string secret = c.WriteSource("secret", "424242\n");
  c.StartCoordinator(PKB_FAKE_ENGINE, {"--tokens", tokens, "--secret-seed-file", secret});
  c.StartWorker("w1", {{"FAKE_PKB_EVAL_DELAY", "0.01"}}, {"--token-file", worker_token});
  auto lb = v1::Leaderboard::NewStub(c.channel);
  auto submit = [&](const std::string& token, v1::SubmitRequest r) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    auto reader = c.stub->Submit(&ctx, r);
    grpc::Status st;
    auto events = ReadAll(reader.get(), &st);
    REQUIRE(st.ok());
    REQUIRE(!events.empty());
    return events.back();
  };
  auto request = [&](const std::string& source, const std::string& model, int problem = 1) {
    v1::SubmitRequest r = c.Request(source, 2);
    r.set_problem_id(problem);
    r.set_model(model);
    r.set_agent("loop/1");
    r.add_tags("exp1");
    r.set_submitter("mallory");  // a claim the token overrides
    return r;
  };
  // Every OK result is timed again before it ranks: wait for those runs (the test's engine times
  // the same figure again, so the boards read as before).
  std::vector<v1::EvalEvent> oks;
  auto ok = [&](const std::string& token, v1::EvalEvent done) {
    if (done.result().status() == v1::OK) {
      CHECK(AwaitConfirmation(c, done.result(), token).result().status() == v1::OK);
      oks.push_back(done);
    }
    return done;
  };
  auto submit_and_confirm = [&](const std::string& token, v1::SubmitRequest r) {
    return ok(token, submit(token, std::move(r)));
  };
  v1::EvalEvent a1 = submit_and_confirm("ag-a", request("FAKE_OK FAKE_SPEEDUP=2.0", "m1"));
  CHECK(a1.result().status() == v1::OK);
  const std::string tuned = "FAKE_OK FAKE_SPEEDUP=3.0 FAKE_SECRET_MISMATCH";
  v1::EvalEvent b1 = submit_and_confirm("ag-b", request(tuned, "m2"));
  CHECK(b1.result().status() == v1::OK);
  auto ranked = request(tuned, "m2");
  ranked.set_ranked(true);
  CHECK(submit("ag-b", ranked).result().status() == v1::MISMATCH);  // fails the secret seed
  auto ranked_a = request("FAKE_OK FAKE_SPEEDUP=1.8", "m1");
  ranked_a.set_ranked(true);
  ranked_a.clear_tags();
  v1::EvalEvent a2 = submit_and_confirm("ag-a", ranked_a);
  CHECK(a2.result().status() == v1::OK);
  CHECK(
      submit_and_confirm("ag-b", request("FAKE_OK FAKE_SPEEDUP=1.2", "m2", 2)).result().status() ==
      v1::OK);
  CHECK(oks.size() == 4);
  // The two ranked runs, and the ranked one's confirmation run, ran on offsets of their own,
  // derived from the secret, never the secret.
  std::set<std::string> offsets;
  for (absl::string_view line : absl::StrSplit(Slurp(c.dir + "/engine_runs.log"), '\n')) {
    size_t at = line.find("offset=");
    if (at != absl::string_view::npos)
      offsets.insert(std::string(line.substr(at + 7, line.find(' ', at) - at - 7)));
  }
  CHECK(offsets.size() == 4);  // 0 for the public runs, one each for the ranked ones
  CHECK(offsets.count("0") == 1);
  CHECK(offsets.count("424242") == 0);

  auto call = [&](const std::string& token, auto method, const auto& req, auto* resp) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + token);
    return (lb.get()->*method)(&ctx, req, resp).error_code();
  };
  v1::LeaderboardQuery q;
  q.mutable_filter()->set_problem_id(1);
  v1::LeaderboardAnswer board;
  CHECK(call("wk", &v1::Leaderboard::Stub::Query, q, &board) ==
        grpc::StatusCode::PERMISSION_DENIED);
  // Boards are public: an agent reads the same board as a researcher, others' entries included.
  v1::LeaderboardAnswer agents_board;
  REQUIRE(call("ag-b", &v1::Leaderboard::Stub::Query, q, &agents_board) == grpc::StatusCode::OK);
  REQUIRE(call("res", &v1::Leaderboard::Stub::Query, q, &board) == grpc::StatusCode::OK);
  CHECK(agents_board.SerializeAsString() == board.SerializeAsString());
  REQUIRE(board.boards_size() == 1);
  const v1::Board& b = board.boards(0);
  CHECK(b.gpu_class() == "cpu");  // the worker's class
  CHECK(b.dtype() == "bfloat16");
  REQUIRE(b.entries_size() == 1);  // bob's source failed the secret seed: it never ranks
  CHECK(b.entries(0).submitter() == "alice");
  CHECK(b.entries(0).speedup() == 2.0);
  CHECK(b.entries(0).model() == "m1");
  CHECK(b.entries(0).agent() == "loop/1");
  CHECK(b.entries(0).results() == 2);
  CHECK(board.disqualified_results() == 1);
  CHECK(b.entries(0).confirmation().state() == v1::CONFIRMED);
  CHECK(b.pending_size() == 0);
  q.mutable_filter()->set_seeds(v1::SEEDS_SECRET);
  REQUIRE(call("res", &v1::Leaderboard::Stub::Query, q, &board) == grpc::StatusCode::OK);
  REQUIRE(board.boards_size() == 1);
  CHECK(board.boards(0).entries(0).job_id() == a2.job_id());

  v1::SuiteQuery sq;
  sq.mutable_filter()->set_world_size(2);
  v1::SuiteAnswer suite;
  REQUIRE(call("res", &v1::Leaderboard::Stub::Suite, sq, &suite) == grpc::StatusCode::OK);
  CHECK(suite.tasks() == 2);  // problems 1 and 2 at W=2
  REQUIRE(suite.models_size() == 2);
  CHECK(suite.models(0).model() == "m1");  // fast_1 1/2 each; geomean 2.0 > 1.2
  CHECK(suite.models(0).fast_p(0).fast_p() == Approx(0.5));
  CHECK(suite.models(0).geomean_speedup() == Approx(2.0));
  CHECK(suite.models(1).tasks_correct() == 1);
  CHECK(suite.models(1).best(0).problem_id() == 2);
  v1::SuiteAnswer agents_suite;
  REQUIRE(call("ag-a", &v1::Leaderboard::Stub::Suite, sq, &agents_suite) == grpc::StatusCode::OK);
  CHECK(agents_suite.SerializeAsString() == suite.SerializeAsString());
  CHECK(call("wk", &v1::Leaderboard::Stub::Suite, sq, &agents_suite) ==
        grpc::StatusCode::PERMISSION_DENIED);

  v1::GetSubmissionRequest gs;
  gs.set_job_id(b1.job_id());
  gs.set_include_source(true);
  v1::Submission sub;
  CHECK(call("ag-a", &v1::Leaderboard::Stub::GetSubmission, gs, &sub) ==
        grpc::StatusCode::PERMISSION_DENIED);  // bob's
  REQUIRE(call("ag-b", &v1::Leaderboard::Stub::GetSubmission, gs, &sub) == grpc::StatusCode::OK);
  CHECK(sub.job().request().source() == tuned);
  CHECK(sub.job().request().submitter() == "bob");
  CHECK(!sub.ranks());
  CHECK(sub.events_size() >= 9);
  CHECK(sub.events(sub.events_size() - 1).stage() == v1::DONE);
  REQUIRE(call("res", &v1::Leaderboard::Stub::GetSubmission, gs, &sub) == grpc::StatusCode::OK);

  v1::ListSubmissionsRequest ls;
  v1::ListSubmissionsAnswer mine;
  REQUIRE(call("ag-a", &v1::Leaderboard::Stub::ListSubmissions, ls, &mine) == grpc::StatusCode::OK);
  // alice's only, newest first: each result after its confirmation run.
  REQUIRE(mine.submissions_size() == 4);
  CHECK(mine.submissions(0).confirms_job_id() == a2.job_id());
  CHECK(mine.submissions(1).job_id() == a2.job_id());
  CHECK(mine.submissions(1).ranked());
  CHECK(mine.submissions(1).confirmation_job_id() == mine.submissions(0).job_id());
  CHECK(mine.submissions(3).job_id() == a1.job_id());
  ls.mutable_filter()->set_tag("exp1");
  REQUIRE(call("res", &v1::Leaderboard::Stub::ListSubmissions, ls, &mine) == grpc::StatusCode::OK);
  CHECK(mine.submissions_size() == 7);  // 4 submissions, 3 of them confirmed (a2 has no tag)

  // Export from the CLI.
  auto run = [&](std::vector<std::string> args) {
    SubprocessOptions o;
    o.argv = {PKB_CLI_BIN, "--coordinator", absl::StrCat("127.0.0.1:", c.port)};
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.timeout = absl::Seconds(60);
    return RunSubprocess(o).value();
  };
  auto csv = run({"--token", "res", "leaderboard", "-p", "1", "--csv"});
  CHECK(csv.exit_code == 0);
  CHECK(csv.out.rfind("problem_id,problem_slug,world_size,dtype,gpu_class,rank,", 0) == 0);
  CHECK(csv.out.find("1,1_allreduce,2,bfloat16,cpu,1,alice,m1,loop/1,2,") != std::string::npos);
  auto json = run({"--token", "res", "--json", "suite", "-w", "2"});
  CHECK(json.out.find("\"fastP\"") != std::string::npos);
  auto agents_csv = run({"--token", "ag-a", "leaderboard", "-p", "1", "--csv"});
  CHECK(agents_csv.exit_code == 0);  // boards are public: agents read them too
  CHECK(agents_csv.out == csv.out);
  CHECK(run({"--token", "wk", "leaderboard"}).exit_code == 6);  // PERMISSION_DENIED
  auto hist = run({"--token", "ag-a", "history", a1.job_id(), "--csv"});
  CHECK(hist.exit_code == 0);
  CHECK(hist.out.find(",DONE,") != std::string::npos);
  CHECK(hist.out.find(",OK,2,") != std::string::npos);
  auto subs = run({"--token", "res", "submissions", "--model", "m2", "--csv"});
  CHECK(subs.out.find(",MISMATCH,") != std::string::npos);
}

// A token's metadata on a fresh context.
std::unique_ptr<grpc::ClientContext> As(const std::string& token) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  return ctx;
}

// Submits as `token` and reads the stream to its end.
std::vector<v1::EvalEvent> SubmitAs(Cluster& c, const std::string& token,
                                    const v1::SubmitRequest& r, grpc::Status* st) {
  auto ctx = As(token);
  auto reader = c.stub->Submit(ctx.get(), r);
  return ReadAll(reader.get(), st);
}

// The first event of a submission (its job id), leaving the stream to run on in `reader`.
std::string FirstEvent(grpc::ClientReader<v1::EvalEvent>* reader) {
  v1::EvalEvent e;
  return reader->Read(&e) ? e.job_id() : "";
}

TEST_CASE(
    "tenants: another agent's job can be neither read, watched nor cancelled, and an "
    "identical submission gets a job of its own",
    "[service][auth][tenants]") {
  Cluster c;
  std::string tokens = c.WriteSource("tokens",
                                     "al agent alice\nbo agent bob\nres researcher rita\n"
                                     "wt worker w1 gpu_class=cpu max_world_size=8\n");
  std::string worker_token = c.WriteSource("worker.token", "wt\n");
  c.StartCoordinator(PKB_FAKE_ENGINE, {"--tokens", tokens});
  c.StartWorker("w1", {{"FAKE_PKB_EVAL_DELAY", "0.4"}}, {"--token-file", worker_token});

  auto alice_ctx = As("al");
  auto alice = c.stub->Submit(alice_ctx.get(), c.Request("FAKE_OK shared by two"));
  const std::string a = FirstEvent(alice.get());
  REQUIRE(!a.empty());

  v1::GetJobRequest g;
  g.set_job_id(a);
  v1::Job job;
  CHECK(c.stub->Get(As("bo").get(), g, &job).error_code() == grpc::StatusCode::PERMISSION_DENIED);
  v1::CancelRequest cancel;
  cancel.set_job_id(a);
  CHECK(c.stub->Cancel(As("bo").get(), cancel, &job).error_code() ==
        grpc::StatusCode::PERMISSION_DENIED);
  {
    auto ctx = As("bo");
    v1::WatchRequest w;
    w.set_job_id(a);
    auto reader = c.stub->Watch(ctx.get(), w);
    grpc::Status st;
    CHECK(ReadAll(reader.get(), &st).empty());
    CHECK(st.error_code() == grpc::StatusCode::PERMISSION_DENIED);
  }
  CHECK(c.stub->Get(As("res").get(), g, &job).ok());  // researchers read every job
  CHECK(c.stub->Get(As("al").get(), g, &job).ok());

  // Bob's identical source: a job of his own that shares Alice's run and hears its stages.
  grpc::Status st;
  std::vector<v1::EvalEvent> bob = SubmitAs(c, "bo", c.Request("FAKE_OK shared by two"), &st);
  REQUIRE(st.ok());
  REQUIRE(!bob.empty());
  const std::string b = bob.front().job_id();
  CHECK(b != a);
  CheckSequence(bob);
  CHECK(bob.back().result().status() == v1::OK);
  CHECK(bob.back().result().cached());
  CHECK(std::any_of(bob.begin(), bob.end(),
                    [](const v1::EvalEvent& e) { return e.stage() == v1::BENCHMARKING; }));
  g.set_job_id(b);
  REQUIRE(c.stub->Get(As("bo").get(), g, &job).ok());
  CHECK(job.cached_from_job_id() == a);
  CHECK(job.request().submitter() == "bob");
  CHECK(job.reported_by_worker() == "w1");
  std::vector<v1::EvalEvent> rest = ReadAll(alice.get(), &st);
  REQUIRE(!rest.empty());
  CHECK(rest.back().result().status() == v1::OK);
  CHECK_FALSE(rest.back().result().cached());
  CHECK(bob.back().result().confirmation_job_id().empty());  // Alice's result is confirmed
  // Bob may not follow Alice's confirmation run; Alice may.
  {
    auto ctx = As("bo");
    v1::WatchRequest w;
    w.set_job_id(rest.back().result().confirmation_job_id());
    auto reader = c.stub->Watch(ctx.get(), w);
    CHECK(ReadAll(reader.get(), &st).empty());
    CHECK(st.error_code() == grpc::StatusCode::PERMISSION_DENIED);
  }
  CHECK(AwaitConfirmation(c, rest.back().result(), "al").result().status() == v1::OK);
  CHECK(EngineRuns(c) == 2);  // one evaluation for both, and Alice's confirmation run

  // Alice cancels a run Bob shares: Bob's job goes on, on its own.
  auto alice2_ctx = As("al");
  auto alice2 = c.stub->Submit(alice2_ctx.get(), c.Request("FAKE_OK cancelled under bob"));
  const std::string a2 = FirstEvent(alice2.get());
  auto bob2_ctx = As("bo");
  auto bob2 = c.stub->Submit(bob2_ctx.get(), c.Request("FAKE_OK cancelled under bob"));
  const std::string b2 = FirstEvent(bob2.get());
  REQUIRE(!b2.empty());
  CHECK(b2 != a2);
  cancel.set_job_id(a2);
  REQUIRE(c.stub->Cancel(As("al").get(), cancel, &job).ok());
  CHECK(job.result().status() == v1::CANCELLED);
  rest = ReadAll(bob2.get(), &st);
  REQUIRE(!rest.empty());
  CHECK(rest.back().result().status() == v1::OK);
  CHECK_FALSE(rest.back().result().cached());
  CHECK(std::any_of(rest.begin(), rest.end(), [](const v1::EvalEvent& e) {
    return e.message().find("queued on its own") != std::string::npos;
  }));
}

TEST_CASE(
    "worker tokens: bound to a worker id and a grant, verdicts attributable, an admin "
    "voids one worker's results",
    "[service][auth][workers]") {
  Cluster c;
  std::string tokens = c.WriteSource("tokens",
                                     "al agent alice\nroot admin ops\n"
                                     "wt worker w1 gpu_class=cpu max_world_size=4\n");
  std::string worker_token = c.WriteSource("worker.token", "wt\n");
  c.StartCoordinator(PKB_FAKE_ENGINE, {"--tokens", tokens});
  // Impostors: another id, another class, a larger world size than granted.
  c.StartWorker("w2", {}, {"--token-file", worker_token, "--max-world-size", "4"});
  c.StartWorker("w1/h", {},
                {"--token-file", worker_token, "--gpu-class", "h200", "--max-world-size", "4"});
  c.StartWorker("w1/big", {}, {"--token-file", worker_token, "--max-world-size", "8"});
  auto log_has = [&](const std::string& text) {
    for (int i = 0; i < 150; ++i) {
      if (Slurp(c.dir + "/coordinator.log").find(text) != std::string::npos) return true;
      absl::SleepFor(absl::Milliseconds(100));
    }
    return false;
  };
  CHECK(log_has("may register only as worker 'w1' or 'w1/<suffix>', not 'w2'"));
  CHECK(log_has("claims gpu_class 'h200'; its token grants 'cpu'"));
  CHECK(log_has("claims max_world_size 8; its token grants at most 4"));
  c.workers.clear();  // the impostors stop retrying
  c.StartWorker("w1/a", {}, {"--token-file", worker_token, "--max-world-size", "4"});

  grpc::Status st;
  std::vector<v1::EvalEvent> ev = SubmitAs(c, "al", c.Request("FAKE_OK FAKE_SPEEDUP=3"), &st);
  REQUIRE(st.ok());
  REQUIRE(ev.back().result().status() == v1::OK);
  const std::string id = ev.front().job_id();
  AwaitConfirmation(c, ev.back().result(), "al");
  v1::GetJobRequest g;
  g.set_job_id(id);
  v1::Job job;
  REQUIRE(c.stub->Get(As("al").get(), g, &job).ok());
  CHECK(job.reported_by_worker() == "w1/a");
  CHECK(job.gpu_class() == "cpu");
  // A cache copy carries the original's worker, so voiding reaches it too.
  std::vector<v1::EvalEvent> copy = SubmitAs(c, "al", c.Request("FAKE_OK FAKE_SPEEDUP=3"), &st);
  REQUIRE(copy.back().result().cached());

  auto admin = v1::Admin::NewStub(c.channel);
  v1::VoidWorkerRequest vr;
  vr.set_worker_id("w1/a");
  vr.set_reason("its token leaked");
  v1::VoidWorkerAnswer va;
  CHECK(admin->VoidWorker(As("al").get(), vr, &va).error_code() ==
        grpc::StatusCode::PERMISSION_DENIED);
  REQUIRE(admin->VoidWorker(As("root").get(), vr, &va).ok());
  CHECK(va.voided() == 3);  // the result, its confirmation run and the copy
  REQUIRE(c.stub->Get(As("al").get(), g, &job).ok());
  CHECK(job.result().status() == v1::VOIDED);
  CHECK(job.result().voided_status() == v1::OK);
  CHECK(job.result().voided_reason() == "its token leaked");
  REQUIRE(admin->VoidWorker(As("root").get(), vr, &va).ok());
  CHECK(va.voided() == 0);  // idempotent
  // Never served from the cache again: the same source runs anew.
  std::vector<v1::EvalEvent> again = SubmitAs(c, "al", c.Request("FAKE_OK FAKE_SPEEDUP=3"), &st);
  REQUIRE(st.ok());
  CHECK(again.back().result().status() == v1::OK);
  CHECK_FALSE(again.back().result().cached());
  AwaitConfirmation(c, again.back().result(), "al");
  CHECK(EngineRuns(c) == 4);  // each run with its confirmation run
  // And the CLI says it.
  SubprocessOptions o;
  o.argv = {PKB_CLI_BIN,   "--coordinator", absl::StrCat("127.0.0.1:", c.port),
            "--token",     "root",          "admin",
            "void-worker", "w1/a",          "--reason",
            "again"};
  o.timeout = absl::Seconds(60);
  auto cli = RunSubprocess(o);
  REQUIRE(cli.ok());
  CHECK(cli->exit_code == 0);
  CHECK(cli->out.find("voided 2 results of worker w1/a") != std::string::npos);
}

TEST_CASE(
    "requests beyond a problem's limits are refused naming the field, and a job nobody can "
    "run ends at the queue deadline",
    "[service][limits]") {
  Cluster c;
  c.StartCoordinator(PKB_FAKE_ENGINE, {"--gpu-classes", "cpu,h200", "--queue-deadline", "2"});
  auto refused = [&](v1::SubmitRequest r, const std::string& field) {
    grpc::Status st;
    auto events = SubmitAs(c, "", r, &st);
    INFO(field << ": " << st.error_message());
    CHECK(events.empty());
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(st.error_message().rfind(field, 0) == 0);
  };
  v1::SubmitRequest r = c.Request("FAKE_OK limits");
  r.set_m(int64_t{1} << 40);
  refused(r, "m:");
  r = c.Request("FAKE_OK limits");
  r.set_n(int64_t{1} << 40);
  refused(r, "n:");
  r = c.Request("FAKE_OK limits");
  r.set_m(60000);
  r.set_n(60000);
  refused(r, "m * n:");
  r = c.Request("FAKE_OK limits");
  r.set_trials(1000);
  refused(r, "trials:");
  r = c.Request("FAKE_OK limits");
  r.set_iters(1000000);
  refused(r, "iters:");
  r = c.Request("FAKE_OK limits");
  r.set_dtype("int8");
  refused(r, "dtype:");
  r = c.Request("FAKE_OK limits");
  r.set_gpu_class("a100");
  refused(r, "gpu_class:");
  refused(c.Request(std::string("// caf\xc3\xa9 is fine, \xff\xfe is not\n")), "source:");
  r = c.Request("FAKE_OK limits");
  r.set_dtype("bf16");  // the short name is the same dtype
  {
    grpc::Status st;
    auto ctx = As("");
    auto reader = c.stub->Submit(ctx.get(), r);
    REQUIRE(!FirstEvent(reader.get()).empty());
  }

  // No worker serves h200 here: the job ends at the queue deadline instead of waiting forever.
  r = c.Request("FAKE_OK nobody runs it", 8);
  r.set_gpu_class("h200");
  grpc::Status st;
  auto events = SubmitAs(c, "", r, &st);
  REQUIRE(st.ok());
  REQUIRE(!events.empty());
  CHECK(events.back().result().status() == v1::CANCELLED);
  CHECK(events.back().result().message().find("queue deadline") != std::string::npos);
  // Not reloaded by a restart: it is finished.
  c.coordinator->Kill(SIGKILL);
  c.StartCoordinator(PKB_FAKE_ENGINE, {"--gpu-classes", "cpu,h200", "--queue-deadline", "2"});
  v1::GetJobRequest g;
  g.set_job_id(events.front().job_id());
  v1::Job job;
  REQUIRE(c.stub->Get(As("").get(), g, &job).ok());
  CHECK(job.stage() == v1::DONE);
}

TEST_CASE("pkb submit follows a job that takes a minute, across a coordinator restart",
          "[service][cli]") {
  Cluster c;
  c.lease_timeout = "15";  // the worker resumes its lease after the restart
  c.StartCoordinator(PKB_FAKE_ENGINE);
  // Seven stages of 8 s: about a minute from submit to verdict.
  c.StartWorker("w1", {{"FAKE_PKB_EVAL_DELAY", "8"}});
  std::string source = c.WriteSource("slow.cu", "FAKE_OK a minute\n");
  auto cli = std::async(std::launch::async, [&] {
    SubprocessOptions o;
    o.argv = {PKB_CLI_BIN,
              "--coordinator",
              absl::StrCat("127.0.0.1:", c.port),
              "--connect-timeout",
              "2",
              "submit",
              "-p",
              "1",
              "-w",
              "2",
              source};
    o.timeout = absl::Seconds(110);
    return RunSubprocess(o);
  });
  absl::SleepFor(absl::Seconds(12));
  c.coordinator->Kill(SIGKILL);
  absl::SleepFor(absl::Seconds(3));  // the client sees the coordinator gone
  c.StartCoordinator(PKB_FAKE_ENGINE);
  absl::StatusOr<SubprocessResult> r = cli.get();
  REQUIRE(r.ok());
  INFO(r->out << r->err);
  CHECK(r->exit_code == 0);
  CHECK(r->elapsed > absl::Seconds(50));
  CHECK(r->out.find("verdict: OK") != std::string::npos);
  CHECK(r->err.find("reattaching to") != std::string::npos);
}

// Waits until the coordinator's log says `what` (a worker connected), at most 30 s.
void AwaitLog(Cluster& c, const std::string& what) {
  for (int i = 0; i < 1500 && Slurp(c.dir + "/coordinator.log").find(what) == std::string::npos;
       ++i)
    absl::SleepFor(absl::Milliseconds(20));
  REQUIRE(Slurp(c.dir + "/coordinator.log").find(what) != std::string::npos);
}

// A ranked result is timed again on the other worker, pending on the board meanwhile, through a
// kill -9 of the coordinator, then ranked with the lower figure; the CLI shows both states.
void ConfirmationEndToEnd(Cluster& c) {
  std::string tokens = c.WriteSource("tokens",
                                     "al agent alice\nbo agent bob\nres researcher rita\n"
                                     "wk1 worker w1 gpu_class=cpu max_world_size=8\n"
                                     "wk2 worker w2 gpu_class=cpu max_world_size=8\n");
  std::string secret = c.WriteSource("secret", "424242\n");
  const std::vector<std::string> flags = {"--tokens", tokens, "--secret-seed-file", secret};
  c.lease_timeout = "10";  // the workers come back from the coordinator's restart in time
  c.StartCoordinator(PKB_FAKE_ENGINE, flags);
  // w1 first (it takes the submission), then w2: slower stages, and it times half the speedup.
  c.StartWorker("w1", {{"FAKE_PKB_EVAL_DELAY", "0.01"}},
                {"--token-file", c.WriteSource("wk1", "wk1\n")});
  AwaitLog(c, "worker w1 connected");
  c.StartWorker("w2", {{"FAKE_PKB_EVAL_DELAY", "0.6"}, {"FAKE_SPEEDUP_FACTOR", "0.5"}},
                {"--token-file", c.WriteSource("wk2", "wk2\n")});
  AwaitLog(c, "worker w2 connected");

  v1::SubmitRequest r = c.Request("FAKE_OK FAKE_SPEEDUP=2.0");
  r.set_ranked(true);
  r.set_model("m1");
  grpc::Status st;
  std::vector<v1::EvalEvent> events = SubmitAs(c, "al", r, &st);
  REQUIRE(st.ok());
  const v1::EvalEvent done = events.back();
  REQUIRE(done.result().status() == v1::OK);
  CHECK(done.result().speedup() == 2.0);
  const std::string original = done.job_id();
  const std::string cid = done.result().confirmation_job_id();
  REQUIRE(!cid.empty());
  CHECK(done.message().find("confirmation run " + cid + " queued") != std::string::npos);

  // Meanwhile it is pending: shown apart, not ranked.
  auto lb = v1::Leaderboard::NewStub(c.channel);
  v1::LeaderboardQuery q;
  q.mutable_filter()->set_problem_id(1);
  v1::LeaderboardAnswer board;
  REQUIRE(lb->Query(As("res").get(), q, &board).ok());
  REQUIRE(board.boards_size() == 1);
  CHECK(board.boards(0).entries_size() == 0);
  REQUIRE(board.boards(0).pending_size() == 1);
  CHECK(board.boards(0).pending(0).job_id() == original);
  CHECK(board.boards(0).pending(0).confirmation().state() == v1::CONFIRMATION_PENDING);
  CHECK(board.pending_results() == 1);
  auto cli = [&](std::vector<std::string> args) {
    SubprocessOptions o;
    o.argv = {PKB_CLI_BIN, "--coordinator", absl::StrCat("127.0.0.1:", c.port)};
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.timeout = absl::Seconds(60);
    return RunSubprocess(o).value();
  };
  auto text = cli({"--token", "res", "leaderboard", "-p", "1"});
  CHECK(text.exit_code == 0);
  CHECK(text.out.find("pending: awaiting its confirmation run (job " + cid) != std::string::npos);
  // The submitter sees the confirmation job; another agent does not.
  v1::GetJobRequest g;
  g.set_job_id(cid);
  v1::Job conf;
  CHECK(c.stub->Get(As("bo").get(), g, &conf).error_code() == grpc::StatusCode::PERMISSION_DENIED);
  REQUIRE(c.stub->Get(As("al").get(), g, &conf).ok());
  CHECK(conf.confirms_job_id() == original);

  // The coordinator dies while the confirmation runs; the restarted one finishes it.
  c.coordinator->Kill(SIGKILL);
  c.StartCoordinator(PKB_FAKE_ENGINE, flags);
  v1::EvalResult first = done.result();
  v1::EvalEvent confirmed = AwaitConfirmation(c, first, "al");
  REQUIRE(confirmed.result().status() == v1::OK);
  CHECK(confirmed.result().speedup() == 1.0);  // w2 times half
  CHECK(confirmed.result().confirms_job_id() == original);
  REQUIRE(c.stub->Get(As("al").get(), g, &conf).ok());
  CHECK(conf.reported_by_worker() == "w2");  // not the worker that ran the original
  lb = v1::Leaderboard::NewStub(c.channel);
  REQUIRE(lb->Query(As("res").get(), q, &board).ok());
  REQUIRE(board.boards_size() == 1);
  REQUIRE(board.boards(0).entries_size() == 1);
  const v1::LeaderboardEntry& e = board.boards(0).entries(0);
  CHECK(e.job_id() == original);
  CHECK(e.speedup() == 1.0);             // the lower of the two
  CHECK(e.candidate_median_us() == 15);  // the confirmation run's
  CHECK(e.confirmation().state() == v1::CONFIRMED);
  CHECK(e.confirmation().first_speedup() == 2.0);
  CHECK(e.confirmation().confirmation_speedup() == 1.0);
  CHECK(board.boards(0).pending_size() == 0);
  auto history = cli({"--token", "al", "history", original});
  CHECK(history.out.find("confirmation: confirmed 1.000x (2.000x, then 1.000x in job " + cid) !=
        std::string::npos);
  CHECK(history.out.find("ranks on the leaderboard") != std::string::npos);
  // Fresh secret inputs for the confirmation: two distinct offsets, neither the secret.
  std::set<std::string> offsets;
  for (absl::string_view line : absl::StrSplit(Slurp(c.dir + "/engine_runs.log"), '\n')) {
    size_t at = line.find("offset=");
    if (at != absl::string_view::npos)
      offsets.insert(std::string(line.substr(at + 7, line.find(' ', at) - at - 7)));
  }
  CHECK(offsets.size() == 2);
  CHECK(offsets.count("0") == 0);
  CHECK(offsets.count("424242") == 0);

  // The CLI follows the confirmation run when asked, and says which figure the boards use.
  auto submitted =
      cli({"--token", "bo", "submit", c.WriteSource("b.cu", "FAKE_OK FAKE_SPEEDUP=1.2"), "-p", "1",
           "-w", "2", "--wait-confirmation"});
  CHECK(submitted.exit_code == 0);
  CHECK(submitted.out.find("following confirmation run") != std::string::npos);
  CHECK(submitted.out.find("the boards use 0.600x") != std::string::npos);
}

TEST_CASE("confirmation runs: pending then across a restart then ranked with the lower figure",
          "[service][confirm]") {
  Cluster c;
  ConfirmationEndToEnd(c);
}

TEST_CASE("postgresql store: confirmation runs pending then across a restart then ranked",
          "[service][postgresql][confirm]") {
  if (std::string why = PostgresSkipReason(); !why.empty()) {
    WARN(why);
    return;
  }
  absl::StatusOr<std::unique_ptr<TestDatabase>> db = TestDatabase::Create();
  REQUIRE(db.ok());
  Cluster c;
  c.store = (*db)->uri();
  ConfirmationEndToEnd(c);
  CHECK(*(*db)->QueryInt("SELECT count(*) FROM jobs WHERE confirms <> ''") == 2);
}

TEST_CASE("shape runs: a ranked result is timed at two drawn shapes and a hard-coded shape fails",
          "[service][confirm][shapes]") {
  Cluster c;
  c.StartCoordinator(PKB_FAKE_ENGINE, {"--secret-seed-file", c.WriteSource("secret", "424242\n")});
  c.StartWorker("w1", {{"FAKE_PKB_EVAL_DELAY", "0.01"}});
  AwaitLog(c, "worker w1 connected");
  auto cli = [&](std::vector<std::string> args) {
    SubprocessOptions o;
    o.argv = {PKB_CLI_BIN, "--coordinator", absl::StrCat("127.0.0.1:", c.port)};
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.timeout = absl::Seconds(60);
    return RunSubprocess(o).value();
  };
  // Problem 2 declares m in 2048..8192 step 1024 at W = 2 (its default 4096 x 1024).
  auto good = cli({"submit", c.WriteSource("good.cu", "FAKE_OK FAKE_SPEEDUP=2.0"), "-p", "2", "-w",
                   "2", "--ranked", "--wait-confirmation"});
  CHECK(good.exit_code == 0);
  INFO(good.out);
  CHECK(good.out.find("following shape run") != std::string::npos);
  CHECK(good.out.find("the boards use 2.000x, the geometric mean over the 3 shapes") !=
        std::string::npos);
  auto lb = v1::Leaderboard::NewStub(c.channel);
  v1::LeaderboardQuery q;
  q.mutable_filter()->set_problem_id(2);
  v1::LeaderboardAnswer board;
  grpc::ClientContext ctx;
  REQUIRE(lb->Query(&ctx, q, &board).ok());
  REQUIRE(board.boards_size() == 1);
  REQUIRE(board.boards(0).entries_size() == 1);
  const v1::Confirmation& conf = board.boards(0).entries(0).confirmation();
  CHECK(conf.state() == v1::CONFIRMED);
  REQUIRE(conf.shapes_size() == 3);
  CHECK(conf.shapes(0).m() == 4096);
  std::set<int64_t> drawn;
  for (int i = 1; i < 3; ++i) {
    const int64_t m = conf.shapes(i).m();
    CHECK(m >= 2048);
    CHECK(m <= 8192);
    CHECK(m % 1024 == 0);
    CHECK(m != 4096);
    CHECK(conf.shapes(i).n() == 1024);
    drawn.insert(m);
  }
  CHECK(drawn.size() == 2);
  // The engine ran them at those shapes: the original and its confirmation at 4096, then each.
  const std::string runs = Slurp(c.dir + "/engine_runs.log");
  CHECK(runs.find("m=4096 n=1024") != std::string::npos);
  for (int64_t m : drawn) CHECK(runs.find(absl::StrCat("m=", m, " n=1024")) != std::string::npos);

  // A candidate tuned for the default shape alone passes twice there, then fails a shape run.
  auto tuned = cli({"submit", c.WriteSource("tuned.cu", "FAKE_OK FAKE_HARDCODED_M=4096"), "-p", "2",
                    "-w", "2", "--ranked", "--wait-confirmation"});
  INFO(tuned.out);
  CHECK(tuned.exit_code != 0);
  CHECK(tuned.out.find("not confirmed: the shape run at m=") != std::string::npos);
  grpc::ClientContext ctx2;
  REQUIRE(lb->Query(&ctx2, q, &board).ok());
  REQUIRE(board.boards_size() == 1);
  CHECK(board.boards(0).entries_size() == 1);  // the good one only
  CHECK(board.disqualified_results() == 1);    // a ranked run of its source failed
}

TEST_CASE("check answers the source policy without a job and practice runs never rank",
          "[service][practice]") {
  Cluster c;
  std::string tokens = c.WriteSource("tokens",
                                     "al agent alice\nres researcher rita\n"
                                     "wk worker w1 gpu_class=cpu max_world_size=8\n");
  c.StartCoordinator(PKB_FAKE_ENGINE, {"--tokens", tokens});
  c.StartWorker("w1", {{"FAKE_PKB_EVAL_DELAY", "0.01"}},
                {"--token-file", c.WriteSource("wk", "wk\n")});
  // Check: the policy, answered by the coordinator; no job, no engine run.
  v1::CheckRequest cr;
  cr.set_problem_id(1);
  cr.set_world_size(2);
  cr.set_source("FAKE_OK\n#include <cstdlib>\nint f() { return getenv(\"HOME\") != 0; }\n");
  v1::CheckAnswer answer;
  REQUIRE(c.stub->Check(As("al").get(), cr, &answer).ok());
  CHECK(answer.verdict() == v1::POLICY);
  REQUIRE(answer.policy_findings_size() >= 1);
  CHECK(answer.policy_findings(0).file() == "candidate.cu");
  CHECK(answer.policy_findings(0).line() == 3);
  CHECK(answer.policy_findings(0).message().find("[environment]") != std::string::npos);
  cr.set_source("FAKE_OK __global__ void k(float* x) { x[0] = 1; }\n");
  REQUIRE(c.stub->Check(As("al").get(), cr, &answer).ok());
  CHECK(answer.verdict() == v1::POLICY_OK);
  CHECK(answer.policy_findings_size() == 0);
  cr.set_world_size(3);  // checked as Submit checks it
  CHECK(c.stub->Check(As("al").get(), cr, &answer).error_code() ==
        grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(c.stub->Check(As("").get(), cr, &answer).error_code() == grpc::StatusCode::UNAUTHENTICATED);
  CHECK(EngineRuns(c) == 0);
  auto cli = [&](std::vector<std::string> args) {
    SubprocessOptions o;
    o.argv = {PKB_CLI_BIN, "--coordinator", absl::StrCat("127.0.0.1:", c.port), "--token", "al"};
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.timeout = absl::Seconds(60);
    return RunSubprocess(o).value();
  };
  auto bad = cli({"check", c.WriteSource("env.cu", "int f() { return getenv(\"X\") != 0; }\n"),
                  "-p", "1", "-w", "2"});
  CHECK(bad.exit_code == 14);
  CHECK(bad.out.rfind("POLICY: breaks 1 rule(s)", 0) == 0);
  CHECK(bad.out.find("  POLICY candidate.cu:1: [environment]") != std::string::npos);
  CHECK(cli({"check", c.WriteSource("ok.cu", "__global__ void k() {}\n"), "-p", "1", "-w", "2"})
            .exit_code == 0);

  // Practice: a REJECTED practice run does not disqualify its source; an OK one never ranks and
  // gets no confirmation run.
  const std::string rejected = c.WriteSource("rej.cu", "FAKE_REJECT practice");
  auto p1 = cli({"submit", rejected, "-p", "1", "-w", "2", "--practice"});
  CHECK(p1.exit_code == 14);
  auto p2 = cli({"--json", "submit", c.WriteSource("fast.cu", "FAKE_OK FAKE_SPEEDUP=9"), "-p", "1",
                 "-w", "2", "--practice"});
  CHECK(p2.exit_code == 0);
  CHECK(p2.out.find("confirmationJobId") == std::string::npos);
  auto lb = v1::Leaderboard::NewStub(c.channel);
  v1::LeaderboardAnswer board;
  REQUIRE(lb->Query(As("res").get(), v1::LeaderboardQuery(), &board).ok());
  CHECK(board.boards_size() == 0);
  CHECK(board.disqualified_results() == 0);
  CHECK(board.pending_results() == 0);
  v1::ListSubmissionsAnswer mine;
  REQUIRE(lb->ListSubmissions(As("al").get(), v1::ListSubmissionsRequest(), &mine).ok());
  REQUIRE(mine.submissions_size() == 2);  // no confirmation run among them
  for (const auto& s : mine.submissions()) CHECK(s.practice());
  v1::GetSubmissionRequest gs;
  gs.set_job_id(mine.submissions(0).job_id());
  v1::Submission sub;
  REQUIRE(lb->GetSubmission(As("al").get(), gs, &sub).ok());
  CHECK(!sub.ranks());
  CHECK(sub.not_ranked_reason().find("a practice submission") == 0);
  // Practice with the secret seed is refused, naming the field.
  auto both = cli({"submit", rejected, "-p", "1", "-w", "2", "--practice", "--ranked"});
  CHECK(both.exit_code == 5);
  CHECK(both.err.find("practice") != std::string::npos);
}

// Check with compile: a real coordinator, a real worker daemon and the real pkb-eval
// --compile-only (nvcc for .cu, g++ for .cc), over gRPC on loopback.
v1::CheckAnswer CheckCompile(Cluster& c, const std::string& source, const std::string& language,
                             grpc::Status* status, bool compile = true) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(150));
  v1::CheckRequest r;
  r.set_problem_id(1);
  r.set_world_size(2);
  r.set_source(source);
  r.set_language(language);
  r.set_compile(compile);
  v1::CheckAnswer a;
  *status = c.stub->Check(&ctx, r, &a);
  return a;
}

// Waits until a worker that compiles has registered: a Check stops saying none does.
void AwaitCompiler(Cluster& c) {
  for (int i = 0; i < 200; ++i) {
    grpc::Status st;
    v1::CheckAnswer a = CheckCompile(c, "int f() { return 0; }\n", "cpp", &st);
    REQUIRE(st.ok());
    if (a.compile_message().find("no connected worker") == std::string::npos) return;
    absl::SleepFor(absl::Milliseconds(50));
  }
  FAIL("no worker registered for compiling");
}

TEST_CASE("check with compile: real nvcc and g++ on a worker and no job and never a hang",
          "[service][check]") {
  if (std::string(PKB_REAL_ENGINE).empty()) {
    WARN("pkb-eval is not built: the compile needs the real engine");
    return;
  }
  Cluster c;
  c.StartCoordinator(PKB_REAL_ENGINE);
  const std::string good =
      ReadFile(std::string(PKB_EXAMPLES_DIR) + "/p001_allreduce_symm.cu").value();
  grpc::Status st;
  // No worker: NOT_COMPILED at once, saying why; the policy verdict stands.
  absl::Time asked = absl::Now();
  v1::CheckAnswer none = CheckCompile(c, good, "cuda", &st);
  REQUIRE(st.ok());
  CHECK(absl::Now() - asked < absl::Seconds(5));
  CHECK(none.verdict() == v1::POLICY_OK);
  CHECK(none.compile_verdict() == v1::CheckAnswer::NOT_COMPILED);
  CHECK(none.compile_message().find("no connected worker compiles cuda") != std::string::npos);
  // Without compile: as before, the policy alone.
  v1::CheckAnswer quick = CheckCompile(c, good, "cuda", &st, /*compile=*/false);
  REQUIRE(st.ok());
  CHECK(quick.verdict() == v1::POLICY_OK);
  CHECK(quick.compile_verdict() == v1::CheckAnswer::COMPILE_VERDICT_UNSPECIFIED);
  CHECK_FALSE(quick.has_compile());
  // A worker of before (no compile slots) is never sent a task.
  c.StartWorker("old", {}, {"--compile-slots", "0"});
  absl::SleepFor(absl::Seconds(1));
  v1::CheckAnswer old = CheckCompile(c, good, "cuda", &st);
  CHECK(old.compile_verdict() == v1::CheckAnswer::NOT_COMPILED);
  CHECK(old.compile_message().find("no connected worker compiles") != std::string::npos);

  c.StartWorker("w1");  // gpu class cpu, the real engine, 2 compile slots
  AwaitCompiler(c);
  v1::CheckAnswer ok = CheckCompile(c, good, "cuda", &st);
  INFO(ok.DebugString() << Slurp(c.dir + "/worker-w1.log"));
  REQUIRE(st.ok());
  CHECK(ok.verdict() == v1::POLICY_OK);
  CHECK(ok.compile_verdict() == v1::CheckAnswer::COMPILED);
  CHECK(ok.compiled_by() == "w1");
  CHECK(ok.compile().ok());
  CHECK(ok.compile().command().find("nvcc") != std::string::npos);
  // A syntax error: COMPILE_ERROR with the line, in the name a submission's source gets.
  v1::CheckAnswer bad = CheckCompile(c,
                                     "#include <pkb/candidate.h>\n"
                                     "PKB_CANDIDATE_API_V1;\n"
                                     "int f() {\n"
                                     "  return 0\n"
                                     "}\n",
                                     "cuda", &st);
  INFO(bad.DebugString());
  REQUIRE(st.ok());
  CHECK(bad.compile_verdict() == v1::CheckAnswer::COMPILE_ERROR);
  REQUIRE(bad.compile().diagnostics_size() >= 1);
  CHECK(bad.compile().diagnostics(0).file() == "candidate.cu");
  CHECK((bad.compile().diagnostics(0).line() == 4 || bad.compile().diagnostics(0).line() == 5));
  // g++ for a cpp candidate.
  const std::string cpu_dir = std::string(PKB_SOURCE_DIR) + "/tests/engine/cpu_candidates/";
  std::string common = ReadFile(cpu_dir + "common.h").value();
  common.replace(common.find("#pragma once"), strlen("#pragma once"), "");
  std::string host = ReadFile(cpu_dir + "p001_correct.cc").value();
  host.replace(host.find("#include \"common.h\""), strlen("#include \"common.h\""), common);
  v1::CheckAnswer cpp = CheckCompile(c, host, "cpp", &st);
  INFO(cpp.DebugString());
  CHECK(cpp.compile_verdict() == v1::CheckAnswer::COMPILED);
  CHECK(cpp.compile().command().find("g++") != std::string::npos);
  // The policy first: nothing is compiled for a source that breaks it.
  v1::CheckAnswer env =
      CheckCompile(c, "#include <cstdlib>\nint f() { return getenv(\"X\") != 0; }\n", "cuda", &st);
  CHECK(env.verdict() == v1::POLICY);
  CHECK(env.compile_verdict() == v1::CheckAnswer::COMPILE_VERDICT_UNSPECIFIED);
  // No job came of any of it.
  grpc::ClientContext get_ctx;
  v1::GetJobRequest get;
  get.set_job_id("j0");
  v1::Job job;
  CHECK(c.stub->Get(&get_ctx, get, &job).error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK(Slurp(c.dir + "/worker-w1.log").find("(attempt ") == std::string::npos);  // no lease
  // The CLI: --compile prints the verdict and exits 10 on a compile error.
  SubprocessOptions o;
  o.argv = {PKB_CLI_BIN,
            "--coordinator",
            absl::StrCat("127.0.0.1:", c.port),
            "check",
            c.WriteSource("bad.cu", "int f() {\n  return 0\n}\n"),
            "-p",
            "1",
            "-w",
            "2",
            "--compile"};
  o.timeout = absl::Seconds(150);
  SubprocessResult cli = RunSubprocess(o).value();
  INFO(cli.out << cli.err);
  CHECK(cli.exit_code == 10);
  CHECK(cli.out.find("COMPILE_ERROR: ") != std::string::npos);
  CHECK(cli.out.find("  candidate.cu:") != std::string::npos);
}

TEST_CASE("check with compile: a worker lost mid-compile answers NOT_COMPILED at once",
          "[service][check]") {
  Cluster c;
  c.StartCoordinator(PKB_FAKE_ENGINE);
  Process* w = c.StartWorker("w1");
  AwaitCompiler(c);
  // The test double's --compile-only sleeps on FAKE_HANG: the worker is killed meanwhile.
  auto pending = std::async(std::launch::async, [&] {
    grpc::Status st;
    v1::CheckAnswer a = CheckCompile(c, "FAKE_HANG\n", "cuda", &st);
    REQUIRE(st.ok());
    return a;
  });
  absl::SleepFor(absl::Seconds(1));
  const absl::Time killed = absl::Now();
  w->Kill();
  REQUIRE(pending.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  v1::CheckAnswer a = pending.get();
  INFO(a.DebugString());
  CHECK(absl::Now() - killed < absl::Seconds(10));
  CHECK(a.compile_verdict() == v1::CheckAnswer::NOT_COMPILED);
  CHECK(a.compile_message().find("worker w1 was lost") != std::string::npos);
  CHECK(a.compiled_by() == "w1");
}

}  // namespace
}  // namespace pkb
