// End-to-end, jobs: submission and its stream, reattaching, cancel, deduplication, kill -9 of
// the coordinator and of workers, workers' scratch and draining, health, and requests' limits
// (cluster.h: the fixture).
#include <sys/stat.h>

#include "tests/service/cluster.h"

namespace pkb {
namespace service_test {
namespace {

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

TEST_CASE(
    "a verdict reaches its client while its engine still ends and the next job waits for that",
    "[service]") {
  Cluster c;
  c.StartCoordinator(PKB_FAKE_ENGINE);
  const std::string log = c.dir + "/engine_runs.log";  // the test double's, one line a run
  c.StartWorker("w1");
  auto submit = [&](const std::string& source) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    auto reader = c.stub->Submit(&ctx, c.Request(source));
    grpc::Status st;
    return ReadAll(reader.get(), &st);
  };
  // The engine gives its verdict, then takes 2 s to end (its ranks' teardown). A MISMATCH: an OK
  // verdict would queue its confirmation run, a job of its own on this worker.
  auto first = submit("FAKE_MISMATCH FAKE_LINGER=2 first");
  REQUIRE(!first.empty());
  CHECK(first.back().result().status() == v1::MISMATCH);
  CHECK(Slurp(log).find("ended") == std::string::npos);  // the verdict came first
  // The worker stays taken (its heartbeat says finishing) until that engine has ended: the next
  // job is leased only then, not at the DONE.
  auto second = submit("FAKE_OK second");
  REQUIRE(!second.empty());
  CHECK(second.back().result().status() == v1::OK);
  int64_t leased = 0;
  for (const auto& e : second) {
    if (e.message().rfind("leased to worker", 0) == 0) leased = e.unix_micros();
  }
  REQUIRE(leased > 0);
  CHECK(leased - first.back().unix_micros() > 1'500'000);
  const std::string ran = Slurp(log);
  INFO(ran);
  const size_t ended = ran.find("ended");
  const size_t next = ran.find("source=", ran.find("\n") + 1);
  REQUIRE(ended != std::string::npos);
  REQUIRE(next != std::string::npos);
  CHECK(ended < next);
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

TEST_CASE("a worker given a share of the node's GPUs registers it and runs its engines on it",
          "[service]") {
  Cluster c;
  c.StartCoordinator(PKB_FAKE_ENGINE);
  // A test double of nvidia-smi: a node of two H200s, GPU 1 of this UUID. It lists both unless
  // asked about one (--id=1 or its UUID); about any other, it says so on stderr and fails.
  const std::string uuid = "GPU-11111111-2222-3333-4444-555555555555";
  std::filesystem::create_directories(c.dir + "/bin");
  REQUIRE(WriteFileAtomic(c.dir + "/bin/nvidia-smi", R"(#!/bin/sh
id=
for a in "$@"; do case "$a" in --id=*) id="${a#--id=}";; esac; done
line() { case "$*" in *uuid*) echo "NVIDIA H200, 580.159.04, $1";; *) echo "NVIDIA H200";; esac; }
case "$id" in
  "") line GPU-00000000-2222-3333-4444-555555555555 "$@"; line )" +
                                                         uuid + R"( "$@";;
  1|)" + uuid + R"() line )" + uuid + R"( "$@";;
  *) echo "No devices were found" >&2; exit 6;;
esac
)")
              .ok());
  chmod((c.dir + "/bin/nvidia-smi").c_str(), 0755);
  const std::map<std::string, std::string> env = {
      {"PATH", c.dir + "/bin:" + std::string(getenv("PATH"))}};
  // A share the node does not have: the worker says so and stops.
  SubprocessOptions bad;
  bad.argv = {PKB_WORKER_BIN, "--coordinator", absl::StrCat("127.0.0.1:", c.port),
              "--engine",     PKB_FAKE_ENGINE, "--scratch",
              c.dir,          "--gpus",        "7"};
  bad.env = env;
  bad.merge_stderr = true;
  bad.timeout = absl::Seconds(30);
  auto refused = RunSubprocess(bad);
  REQUIRE(refused.ok());
  CHECK(refused->exit_code == 2);
  CHECK_THAT(refused->out, Catch::Contains("--gpus 7: nvidia-smi could not list them") &&
                               Catch::Contains("No devices were found"));
  // GPU 1: one GPU, and every engine the worker starts (the job's, the standby's) gets its UUID.
  c.StartWorker("share1", env, {"--gpus", "1", "--max-world-size", "2"});
  // A job's verdict (STATUS_UNSPECIFIED where its stream failed or brought nothing).
  auto verdict = [&](const std::string& source) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    auto reader = c.stub->Submit(&ctx, c.Request(source));
    grpc::Status st;
    auto events = ReadAll(reader.get(), &st);
    return st.ok() && !events.empty() ? events.back().result().status() : v1::STATUS_UNSPECIFIED;
  };
  CHECK(verdict("FAKE_OK") == v1::OK);
  const std::string log = Slurp(c.dir + "/worker-share1.log");
  INFO(log);
  CHECK_THAT(log, Catch::Contains("x1 (NVIDIA H200: " + uuid + ")"));
  CHECK_THAT(Slurp(c.dir + "/engine_runs.log"), Catch::Contains(" gpus=" + uuid + " "));
  // Its health check after the job asked nvidia-smi about the share only (the node's two GPUs
  // would fail it), and passed: a second job is taken.
  CHECK(verdict("FAKE_OK second") == v1::OK);
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

}  // namespace
}  // namespace service_test
}  // namespace pkb
