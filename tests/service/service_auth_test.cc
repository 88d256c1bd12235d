// End-to-end, access: token roles and rate limits, TLS, tenants, worker tokens (cluster.h).
#include "tests/service/cluster.h"

namespace pkb {
namespace service_test {
namespace {

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

}  // namespace
}  // namespace service_test
}  // namespace pkb
