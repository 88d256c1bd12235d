// EngineExecutor against fake_pkb_eval.sh (a test double of pkb-eval's contract) and a few
// misbehaving engines written on the spot.
#include "worker/daemon/executor.h"

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <thread>

#include "absl/time/clock.h"
#include "common/files.h"

namespace pkb {
namespace {

struct Scratch {
  Scratch() { dir = *MakeTempDir("/tmp", "pkb-exec-test"); }
  ~Scratch() { RemoveTree(dir).IgnoreError(); }
  std::string Script(const std::string& name, const std::string& body) {
    std::string path = dir + "/" + name;
    REQUIRE(WriteFileAtomic(path, "#!/bin/sh\n" + body).ok());
    chmod(path.c_str(), 0755);
    return path;
  }
  std::string dir;
};

v1::Lease Lease(const std::string& source) {
  v1::Lease l;
  l.set_job_id("j1");
  l.set_attempt(1);
  l.mutable_spec()->set_problem_id(1);
  l.mutable_spec()->set_world_size(2);
  l.set_job_key("key-j1");
  l.set_source(source);
  l.set_deadline_ms(30000);
  return l;
}

TEST_CASE("the engine's events are streamed and its verdict returned", "[executor]") {
  Scratch s;
  EngineExecutor exec({PKB_FAKE_ENGINE, s.dir});
  CancelToken cancel;
  std::vector<v1::EvalEvent> events;
  v1::EvalResult r = exec.Run(
      Lease("FAKE_OK"), [&](const v1::EvalEvent& e) { events.push_back(e); }, &cancel);
  CHECK(r.status() == v1::OK);
  CHECK(r.speedup() == 1.5);
  REQUIRE(events.size() == 7);  // COMPILING, 5 x VERIFYING, BENCHMARKING
  CHECK(events[0].stage() == v1::COMPILING);
  CHECK(events[1].trial_ok());
  CHECK(exec.Run(
                Lease("FAKE_COMPILE_ERROR"), [](const v1::EvalEvent&) {}, &cancel)
            .status() == v1::COMPILE_ERROR);
}

TEST_CASE("a compile task runs the engine with --compile-only and a deadline", "[executor]") {
  Scratch s;
  // Records its arguments, then answers as the test double does.
  const std::string args = s.dir + "/args";
  const std::string engine =
      s.Script("engine", "echo \"$@\" > " + args + "\nexec " PKB_FAKE_ENGINE " \"$@\"\n");
  EngineExecutor exec({engine, s.dir});
  CancelToken cancel;
  v1::CompileTask task;
  task.set_task_id("c1");
  task.mutable_spec()->set_problem_id(1);
  task.mutable_spec()->set_world_size(2);
  task.mutable_spec()->set_language("cpp");
  task.set_source("int f() { return 0; }");
  task.set_deadline_ms(30000);
  v1::EvalResult r = exec.Compile(task, &cancel);
  INFO(r.message());
  CHECK(r.status() == v1::COMPILED);
  const std::string argv = ReadFile(args).value();
  CHECK(argv.find("--compile-only") != std::string::npos);
  CHECK(argv.find("candidate.cc") != std::string::npos);  // the file name says the language
  CHECK(argv.find("--job-key") == std::string::npos);
  task.set_source("FAKE_COMPILE_ERROR");
  CHECK(exec.Compile(task, &cancel).status() == v1::COMPILE_ERROR);
  // A compile that hangs is killed at the task's deadline.
  task.set_source("FAKE_HANG");
  task.set_deadline_ms(500);
  const absl::Time start = absl::Now();
  v1::EvalResult slow = exec.Compile(task, &cancel);
  CHECK(slow.status() == v1::TIMEOUT);
  CHECK(slow.message().find("the compile ran past its limit") != std::string::npos);
  CHECK(absl::Now() - start < absl::Seconds(10));
}

TEST_CASE("cancel kills the engine's process group", "[executor]") {
  Scratch s;
  EngineExecutor exec({PKB_FAKE_ENGINE, s.dir});
  CancelToken cancel;
  absl::Time start = absl::Now();
  std::thread t([&] {
    absl::SleepFor(absl::Milliseconds(300));
    cancel.Cancel();
  });
  v1::EvalResult r = exec.Run(
      Lease("FAKE_HANG"), [](const v1::EvalEvent&) {}, &cancel);
  t.join();
  CHECK(r.status() == v1::CANCELLED);
  CHECK(absl::Now() - start < absl::Seconds(10));
}

TEST_CASE("an engine past the lease's deadline is killed: TIMEOUT", "[executor]") {
  Scratch s;
  EngineExecutor exec({PKB_FAKE_ENGINE, s.dir});
  CancelToken cancel;
  v1::Lease l = Lease("FAKE_HANG");
  l.set_deadline_ms(300);
  CHECK(exec.Run(
                l, [](const v1::EvalEvent&) {}, &cancel)
            .status() == v1::TIMEOUT);
}

TEST_CASE("an engine that fails is INTERNAL, with its stderr", "[executor]") {
  Scratch s;
  CancelToken cancel;
  EngineExecutor crash({s.Script("crash.sh", "echo 'boom: no problems' >&2\nexit 3\n"), s.dir});
  v1::EvalResult r = crash.Run(
      Lease("x"), [](const v1::EvalEvent&) {}, &cancel);
  CHECK(r.status() == v1::INTERNAL);
  CHECK(r.failed_rank_log().find("boom") != std::string::npos);
  EngineExecutor garbage({s.Script("garbage.sh", "echo not json\n"), s.dir});
  CHECK(garbage
            .Run(
                Lease("x"), [](const v1::EvalEvent&) {}, &cancel)
            .status() == v1::INTERNAL);
  EngineExecutor missing({s.dir + "/no-such-engine", s.dir});
  CHECK(missing
            .Run(
                Lease("x"), [](const v1::EvalEvent&) {}, &cancel)
            .status() == v1::INTERNAL);
}

}  // namespace
}  // namespace pkb
