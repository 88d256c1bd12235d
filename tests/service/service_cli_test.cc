// End-to-end, the pkb CLI: exit codes, a C++ candidate's verdict, functional runs, following a
// job across a coordinator restart (cluster.h).
#include "tests/service/cluster.h"

namespace pkb {
namespace service_test {
namespace {

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
  const std::string file = c.WriteSource("p001_host.cc", HostCandidate("p001_correct.cc"));
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
  const std::string file = c.WriteSource("p001_host.cc", HostCandidate("p001_correct.cc"));
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

}  // namespace
}  // namespace service_test
}  // namespace pkb
