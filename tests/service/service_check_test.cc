// End-to-end, Check: the source policy without a job, practice runs, compile tasks on workers
// (cluster.h).
#include <chrono>

#include "absl/strings/str_join.h"
#include "tests/service/cluster.h"

namespace pkb {
namespace service_test {
namespace {

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
                             grpc::Status* status, bool compile = true, int deadline_s = 150) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(deadline_s));
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
    // 60 s, inside ctest's limit of 120: a compile that never comes back fails with the logs.
    v1::CheckAnswer a = CheckCompile(c, "int f() { return 0; }\n", "cpp", &st, true, 60);
    INFO(st.error_message() << "\ncoordinator:\n"
                            << Slurp(c.dir + "/coordinator.log") << "\nworker:\n"
                            << Slurp(c.dir + "/worker-w1.log"));
    REQUIRE(st.ok());
    if (a.compile_message().find("no connected worker") == std::string::npos) return;
    absl::SleepFor(absl::Milliseconds(50));
  }
  FAIL("no worker registered for compiling");
}

// The compile task that compiles `job_id` ahead on worker w1, once the coordinator says so.
std::string AheadTaskOf(Cluster& c, const std::string& job_id) {
  const std::string said =
      absl::StrCat("job ", job_id, ": compiled ahead on worker w1 (compile task ");
  AwaitLog(c, said);
  const std::string log = Slurp(c.dir + "/coordinator.log");
  const size_t at = log.find(said) + said.size();
  return log.substr(at, log.find(')', at) - at);
}

// Worker w1's log once it says compile task `task` COMPILED (or after `limit`, as it is then).
std::string AwaitCompiled(Cluster& c, const std::string& task, absl::Duration limit) {
  const std::string done = absl::StrCat("compile task ", task, ": COMPILED in ");
  const absl::Time end = absl::Now() + limit;
  std::string log = Slurp(c.dir + "/worker-w1.log");
  while (log.find(done) == std::string::npos && absl::Now() < end) {
    absl::SleepFor(absl::Milliseconds(50));
    log = Slurp(c.dir + "/worker-w1.log");
  }
  return log;
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
  v1::CheckAnswer cpp = CheckCompile(c, HostCandidate("p001_correct.cc"), "cpp", &st);
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

TEST_CASE("compile ahead: a queued job compiles while the worker runs another, then hits the cache",
          "[service][ahead]") {
  if (std::string(PKB_REAL_ENGINE).empty()) {
    WARN("pkb-eval is not built: the compile cache is the real engine's");
    return;
  }
  Cluster c;
  c.StartCoordinator(PKB_REAL_ENGINE, {"--compile-ahead=true"});
  c.StartWorker("w1");  // gpu class cpu, the real engine, 2 compile slots
  AwaitCompiler(c);
  // A source no earlier run can have left in the node's compile cache.
  const std::string nonce = absl::StrCat("// compile ahead ", absl::ToUnixNanos(absl::Now()), "\n");
  v1::SubmitRequest busy = c.Request(nonce + HostCandidate("p001_hang.cc"));
  busy.set_language("cpp");
  v1::SubmitRequest next = c.Request(nonce + HostCandidate("p001_correct.cc"));
  next.set_language("cpp");
  next.mutable_spec()->set_m(64);
  next.mutable_spec()->set_n(64);
  grpc::Status st;
  grpc::ClientContext busy_ctx;
  auto busy_reader = c.stub->Submit(&busy_ctx, busy);
  const std::string busy_id = FirstEvent(busy_reader.get());
  REQUIRE(!busy_id.empty());
  grpc::ClientContext next_ctx;
  auto next_reader = c.stub->Submit(&next_ctx, next);
  const std::string next_id = FirstEvent(next_reader.get());
  REQUIRE(!next_id.empty());
  // The second job compiles ahead on the worker that runs the first, and is done with it.
  const std::string task = AheadTaskOf(c, next_id);
  const std::string worker_log = AwaitCompiled(c, task, absl::Seconds(60));
  INFO(worker_log);
  REQUIRE(worker_log.find(absl::StrCat("compile task ", task, ": COMPILED in ")) !=
          std::string::npos);
  {
    grpc::ClientContext ctx;
    v1::CancelRequest cancel;
    cancel.set_job_id(busy_id);
    v1::Job cancelled;
    REQUIRE(c.stub->Cancel(&ctx, cancel, &cancelled).ok());
  }
  std::vector<v1::EvalEvent> events = ReadAll(next_reader.get(), &st);
  REQUIRE(st.ok());
  REQUIRE(!events.empty());
  const v1::EvalResult& r = events.back().result();
  INFO(r.DebugString());
  CHECK(r.status() == v1::OK);
  CHECK(r.compile().ok());
  CHECK(r.compile().cache_hit());  // compiled once, ahead
  CHECK(
      Slurp(c.dir + "/coordinator.log")
          .find(absl::StrCat("job ", next_id, ": leased to worker w1, which compiled it ahead")) !=
      std::string::npos);
}

TEST_CASE("compile ahead: a draining worker stops a compile nobody waits for", "[service][ahead]") {
  Cluster c;
  c.StartCoordinator(PKB_FAKE_ENGINE, {"--compile-ahead=true"});
  Process* w = c.StartWorker("w1");
  AwaitCompiler(c);
  // The test double runs the first job for 8 s; the second's compile (FAKE_HANG) would take
  // 600 s.
  grpc::ClientContext first_ctx;
  auto first = c.stub->Submit(&first_ctx, c.Request("FAKE_DELAY=8\n"));
  REQUIRE(!FirstEvent(first.get()).empty());
  grpc::ClientContext hang_ctx;
  auto hang = c.stub->Submit(&hang_ctx, c.Request("FAKE_HANG\n"));
  const std::string hang_id = FirstEvent(hang.get());
  AwaitLog(c, absl::StrCat("job ", hang_id, ": compiled ahead on worker w1"));
  absl::SleepFor(absl::Milliseconds(500));  // the compile runs, or at least waits on the worker
  const absl::Time asked = absl::Now();
  w->Terminate();
  CHECK(w->WaitExit(absl::Seconds(60)));
  INFO(Slurp(c.dir + "/worker-w1.log"));
  CHECK(absl::Now() - asked < absl::Seconds(30));
  grpc::Status st;
  std::vector<v1::EvalEvent> events = ReadAll(first.get(), &st);
  REQUIRE(!events.empty());
  CHECK(events.back().stage() == v1::DONE);  // the job it ran ended first
  const std::string log = Slurp(c.dir + "/worker-w1.log");
  CHECK((log.find("draining: 1 compile(s) ahead stopped, 0") != std::string::npos ||
         log.find("draining: 0 compile(s) ahead stopped, 1") != std::string::npos));
}

TEST_CASE("compile ahead: a job's own compile ahead is not counted beside it but another job's is",
          "[service][ahead]") {
  Cluster c;
  c.StartCoordinator(PKB_FAKE_ENGINE, {"--compile-ahead=true"});
  c.StartWorker("w1");
  AwaitCompiler(c);
  // The first job runs about 2 s (7 stages of 0.3 s); the second's compile ahead, on the same
  // worker meanwhile, takes 3 s, so the worker takes the second job while that compile still runs.
  // Deadlines on both streams: a job that never ends fails the test with its logs (a CI run
  // of 2026-12-07 timed out here, at ctest's limit, with no output).
  // Practice jobs: an OK job's confirmation run would be queued behind them and compiled ahead
  // beside the second job once that job's own compile ahead ends, which on a loaded machine it
  // may before the second job is timed.
  const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(60);
  v1::SubmitRequest first_request = c.Request("FAKE_OK FAKE_DELAY=0.3\n");
  v1::SubmitRequest second_request = c.Request("FAKE_OK FAKE_COMPILE_DELAY=3\n");
  first_request.mutable_spec()->set_practice(true);
  second_request.mutable_spec()->set_practice(true);
  grpc::ClientContext first_ctx;
  first_ctx.set_deadline(deadline);
  auto first = c.stub->Submit(&first_ctx, first_request);
  REQUIRE(!FirstEvent(first.get()).empty());
  grpc::ClientContext second_ctx;
  second_ctx.set_deadline(deadline);
  auto second = c.stub->Submit(&second_ctx, second_request);
  const std::string second_id = FirstEvent(second.get());
  const std::string task = AheadTaskOf(c, second_id);
  grpc::Status st;
  std::vector<v1::EvalEvent> events = ReadAll(first.get(), &st);
  INFO(st.error_message() << "\ncoordinator:\n"
                          << Slurp(c.dir + "/coordinator.log") << "\nworker:\n"
                          << Slurp(c.dir + "/worker-w1.log"));
  REQUIRE(!events.empty());
  CHECK(events.back().result().status() == v1::OK);
  CHECK(events.back().result().compiles_beside() == 1);  // the second job's compile
  events = ReadAll(second.get(), &st);
  REQUIRE(!events.empty());
  CHECK(events.back().result().status() == v1::OK);
  CHECK(events.back().result().compiles_beside() == 0);  // its own, still running, is not
  const std::string log = AwaitCompiled(c, task, absl::Seconds(20));
  INFO(log);
  // It was still running when the second job began (so the test shows what it means to).
  const size_t leased = log.find(absl::StrCat("job ", second_id, " (attempt 1)"));
  const size_t compiled = log.find(absl::StrCat("compile task ", task, ": COMPILED in "));
  REQUIRE(leased != std::string::npos);
  REQUIRE(compiled != std::string::npos);
  CHECK(leased < compiled);
}

TEST_CASE("compile tasks beside a job wait while it is timed and go on at its verdict",
          "[service][ahead]") {
  Cluster c;
  c.StartCoordinator(PKB_FAKE_ENGINE);
  c.StartWorker("w1");
  AwaitCompiler(c);
  // The test double compiles this Check's source for 8 s; the job verifies for 3 s, then is timed
  // for 0.6 s.
  auto check = std::async(std::launch::async, [&] {
    grpc::Status st;
    v1::CheckAnswer a = CheckCompile(c, "FAKE_DELAY=8\n", "cuda", &st);
    REQUIRE(st.ok());
    return a;
  });
  AwaitLog(c, "compile task");
  grpc::ClientContext ctx;
  auto job = c.stub->Submit(&ctx, c.Request("FAKE_OK FAKE_DELAY=0.6\n"));
  grpc::Status st;
  std::vector<v1::EvalEvent> events = ReadAll(job.get(), &st);
  REQUIRE(st.ok());
  REQUIRE(!events.empty());
  CHECK(events.back().result().status() == v1::OK);
  // The engine was told, before the timing, that one compile ran beside the job.
  CHECK(events.back().result().compiles_beside() == 1);
  {
    // And the CLI says why this job's reference is not in the node's baseline.
    SubprocessOptions o;
    o.argv = {PKB_CLI_BIN, "--coordinator", absl::StrCat("127.0.0.1:", c.port), "get",
              events.back().job_id()};
    o.timeout = absl::Seconds(60);
    absl::StatusOr<SubprocessResult> got = RunSubprocess(o);
    REQUIRE(got.ok());
    INFO(got->out);
    CHECK(got->out.find("1 compile(s) ran on the node beside this job (the worker's stopped "
                        "before its timing)") != std::string::npos);
  }
  REQUIRE(check.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
  v1::CheckAnswer a = check.get();
  CHECK(a.compile_verdict() == v1::CheckAnswer::COMPILED);
  // A job alone: none (and the engine was told so, or it would say -1).
  grpc::ClientContext alone_ctx;
  auto alone = c.stub->Submit(&alone_ctx, c.Request("FAKE_OK\n"));
  events = ReadAll(alone.get(), &st);
  REQUIRE(!events.empty());
  CHECK(events.back().result().status() == v1::OK);
  CHECK(events.back().result().compiles_beside() == 0);
  const std::string log = Slurp(c.dir + "/worker-w1.log");
  INFO(log);
  const size_t stopped = log.find("1 compile task(s) stopped while the job is timed");
  const size_t resumed = log.find("1 compile task(s) resumed at the verdict");
  CHECK(stopped != std::string::npos);
  CHECK(resumed != std::string::npos);
  CHECK(stopped < resumed);
}

// How many times `what` occurs in `text`.
size_t CountOf(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST_CASE("a compile task that ended as a cache hit is not counted beside a job",
          "[service][ahead]") {
  Cluster c;
  c.StartCoordinator(PKB_FAKE_ENGINE);
  c.StartWorker("w1");
  AwaitCompiler(c);
  // The test double's compile of this Check takes 1 s and says it came from the cache; the job,
  // leased meanwhile, verifies for about 4 s, then is timed.
  auto check = std::async(std::launch::async, [&] {
    grpc::Status st;
    v1::CheckAnswer a =
        CheckCompile(c, "FAKE_COMPILE_DELAY=1 FAKE_COMPILE_CACHE_HIT\n", "cuda", &st);
    REQUIRE(st.ok());
    return a;
  });
  // Sent to the worker (AwaitCompiler's task was the first) before the job is submitted.
  for (int i = 0; i < 1500 && CountOf(Slurp(c.dir + "/coordinator.log"), ") sent to worker") < 2;
       ++i) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  REQUIRE(CountOf(Slurp(c.dir + "/coordinator.log"), ") sent to worker") == 2);
  grpc::ClientContext ctx;
  auto job = c.stub->Submit(&ctx, c.Request("FAKE_OK FAKE_DELAY=1.0\n"));
  grpc::Status st;
  std::vector<v1::EvalEvent> events = ReadAll(job.get(), &st);
  REQUIRE(!events.empty());
  CHECK(events.back().result().status() == v1::OK);
  REQUIRE(check.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
  CHECK(check.get().compile_verdict() == v1::CheckAnswer::COMPILED);
  const std::string log = Slurp(c.dir + "/worker-w1.log");
  INFO(log);
  // The compile ran beside the job (it began first and ended before the timing)...
  const size_t leased = log.find("(attempt 1)");
  const size_t compiled = log.rfind(": COMPILED in ");  // the Check's (AwaitCompiler's is first)
  REQUIRE(leased != std::string::npos);
  REQUIRE(compiled != std::string::npos);
  CHECK(leased < compiled);
  CHECK(log.find("stopped while the job is timed") == std::string::npos);
  // ... and found its outcome in the cache: nothing was beside the job. The worker said it took
  // the task out of the job's count (so the test shows what it means to).
  CHECK(log.find(": from the cache, not counted beside the job") != std::string::npos);
  CHECK(events.back().result().compiles_beside() == 0);
}

// Processes stopped (state T) whose environment names `dir` (what a worker of this cluster started
// inherits).
std::vector<std::string> StoppedProcessesOf(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string pid = entry.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = Slurp(entry.path().string() + "/stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos || close + 2 >= stat.size() || stat[close + 2] != 'T') continue;
    if (Slurp(entry.path().string() + "/environ").find(dir) == std::string::npos) continue;
    out.push_back(pid + " " + stat.substr(0, close + 1));
  }
  return out;
}

TEST_CASE("a worker killed while its compiles are stopped leaves none of them stopped",
          "[service][ahead]") {
  Cluster c;
  c.StartCoordinator(PKB_FAKE_ENGINE);
  Process* w = c.StartWorker("w1");
  AwaitCompiler(c);
  auto check = std::async(std::launch::async, [&] {
    grpc::Status st;
    return CheckCompile(c, "FAKE_DELAY=8\n", "cuda", &st);
  });
  AwaitLog(c, "compile task");
  grpc::ClientContext ctx;
  auto job = c.stub->Submit(&ctx, c.Request("FAKE_OK FAKE_DELAY=0.6\n"));
  bool stopped = false;
  for (int i = 0; i < 1500 && !stopped; ++i) {
    stopped =
        Slurp(c.dir + "/worker-w1.log").find("stopped while the job is timed") != std::string::npos;
    if (!stopped) absl::SleepFor(absl::Milliseconds(10));
  }
  REQUIRE(stopped);
  CHECK(!StoppedProcessesOf(c.dir).empty());  // the compile's, stopped
  w->Kill();
  std::vector<std::string> left = StoppedProcessesOf(c.dir);
  for (int i = 0; i < 250 && !left.empty(); ++i) {
    absl::SleepFor(absl::Milliseconds(20));
    left = StoppedProcessesOf(c.dir);
  }
  INFO(absl::StrJoin(left, "\n"));
  CHECK(left.empty());
  REQUIRE(check.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
}

}  // namespace
}  // namespace service_test
}  // namespace pkb
