// EngineExecutor against fake_pkb_eval.sh (a test double of pkb-eval's contract) and a few
// misbehaving engines written on the spot.
#include "worker/daemon/executor.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/files.h"
#include "common/subprocess.h"

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
  std::vector<v1::EvalResult> verdicts;
  v1::EvalResult r = exec.Run(
      Lease("FAKE_OK"), [&](const v1::EvalEvent& e) { events.push_back(e); },
      [&](const v1::EvalResult& v) { verdicts.push_back(v); }, {}, &cancel);
  CHECK(r.status() == v1::OK);
  REQUIRE(verdicts.size() == 1);  // the DONE line, once, and never among the events
  CHECK(verdicts[0].status() == v1::OK);
  CHECK(r.speedup() == 1.5);
  REQUIRE(events.size() == 7);  // COMPILING, 5 x VERIFYING, BENCHMARKING
  CHECK(events[0].stage() == v1::COMPILING);
  CHECK(events[1].trial_ok());
  CHECK(exec.Run(
                Lease("FAKE_COMPILE_ERROR"), [](const v1::EvalEvent&) {}, {}, {}, &cancel)
            .status() == v1::COMPILE_ERROR);
}

TEST_CASE("the verdict is passed on when the engine gives it, before the engine has ended",
          "[executor]") {
  Scratch s;
  CancelToken cancel;
  const std::string done =
      R"({"sequence":"1","stage":"DONE","result":{"status":"OK","message":"fine"}})";
  // Its verdict first, then a second of its ranks' ending.
  EngineExecutor slow({s.Script("slow.sh", "echo '" + done + "'\nsleep 1\n"), s.dir});
  absl::Time given;
  std::vector<v1::EvalResult> verdicts;
  v1::EvalResult r = slow.Run(
      Lease("x"), [](const v1::EvalEvent&) {},
      [&](const v1::EvalResult& v) {
        given = absl::Now();
        verdicts.push_back(v);
      },
      {}, &cancel);
  const absl::Time ended = absl::Now();
  CHECK(r.status() == v1::OK);
  REQUIRE(verdicts.size() == 1);
  CHECK(verdicts[0].message() == "fine");
  CHECK(ended - given > absl::Milliseconds(500));
  // An engine that fails after its verdict: the verdict went on as given, Run says INTERNAL.
  EngineExecutor failing({s.Script("failing.sh", "echo '" + done + "'\nexit 3\n"), s.dir});
  verdicts.clear();
  r = failing.Run(
      Lease("x"), [](const v1::EvalEvent&) {},
      [&](const v1::EvalResult& v) { verdicts.push_back(v); }, {}, &cancel);
  REQUIRE(verdicts.size() == 1);
  CHECK(verdicts[0].status() == v1::OK);
  CHECK(r.status() == v1::INTERNAL);
  CHECK(r.message().find("the engine exited with exit code 3") != std::string::npos);
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
      Lease("FAKE_HANG"), [](const v1::EvalEvent&) {}, {}, {}, &cancel);
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
                l, [](const v1::EvalEvent&) {}, {}, {}, &cancel)
            .status() == v1::TIMEOUT);
}

TEST_CASE("an engine that fails is INTERNAL, with its stderr", "[executor]") {
  Scratch s;
  CancelToken cancel;
  EngineExecutor crash({s.Script("crash.sh", "echo 'boom: no problems' >&2\nexit 3\n"), s.dir});
  v1::EvalResult r = crash.Run(
      Lease("x"), [](const v1::EvalEvent&) {}, {}, {}, &cancel);
  CHECK(r.status() == v1::INTERNAL);
  CHECK(r.failed_rank_log().find("boom") != std::string::npos);
  EngineExecutor garbage({s.Script("garbage.sh", "echo not json\n"), s.dir});
  CHECK(garbage
            .Run(
                Lease("x"), [](const v1::EvalEvent&) {}, {}, {}, &cancel)
            .status() == v1::INTERNAL);
  EngineExecutor missing({s.dir + "/no-such-engine", s.dir});
  CHECK(missing
            .Run(
                Lease("x"), [](const v1::EvalEvent&) {}, {}, {}, &cancel)
            .status() == v1::INTERNAL);
}

// The engine's log (FAKE_PKB_EVAL_LOG) as lines.
std::vector<std::string> LogLines(const std::string& path) {
  std::vector<std::string> lines;
  std::istringstream in(ReadFile(path).value_or(""));
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

void AwaitStandby(EngineExecutor& exec) {
  const absl::Time end = absl::Now() + absl::Seconds(10);
  while (!exec.standby_waiting() && absl::Now() < end) absl::SleepFor(absl::Milliseconds(10));
  REQUIRE(exec.standby_waiting());
}

TEST_CASE("with standby the engine for the next job is started ahead and takes it",
          "[executor][standby]") {
  Scratch s;
  const std::string log = s.dir + "/engine.log";
  setenv("FAKE_PKB_EVAL_LOG", log.c_str(), 1);
  EngineExecutorOptions o{PKB_FAKE_ENGINE, s.dir};
  o.standby = true;
  o.settle_baseline = 10;
  o.baseline_max_age_hours = 6;
  {
    EngineExecutor exec(o);
    CancelToken cancel;
    CHECK_FALSE(exec.standby_waiting());  // none before the first job: its shape is unknown
    std::vector<v1::EvalEvent> events;
    auto run = [&](const v1::Lease& l) {
      events.clear();
      return exec.Run(
          l, [&](const v1::EvalEvent& e) { events.push_back(e); }, {}, {}, &cancel);
    };
    CHECK(run(Lease("FAKE_OK")).status() == v1::OK);
    AwaitStandby(exec);
    // The second job goes to the engine started for a job like the first (W = 2, CUDA): the same
    // verdict and events.
    v1::EvalResult second = run(Lease("FAKE_OK"));
    CHECK(second.status() == v1::OK);
    CHECK(second.speedup() == 1.5);
    CHECK(events.size() == 7);
    AwaitStandby(exec);
    v1::Lease cpu = Lease("FAKE_COMPILE_ERROR");
    cpu.mutable_spec()->set_language("cpp");
    cpu.mutable_spec()->set_world_size(4);
    CHECK(run(cpu).status() == v1::COMPILE_ERROR);
    AwaitStandby(exec);
    // A job that hangs on the standby engine: its limit and cancel apply from the job's start.
    v1::Lease hang = Lease("FAKE_HANG");
    hang.set_deadline_ms(500);
    const absl::Time t0 = absl::Now();
    CHECK(run(hang).status() == v1::TIMEOUT);
    CHECK(absl::Now() - t0 < absl::Seconds(10));
    AwaitStandby(exec);
    // Cancelled once the job has reached the engine (its log line, the fifth): on a loaded
    // machine a fixed delay could cancel it before, and the log would miss it.
    std::thread canceller([&] {
      const absl::Time end = absl::Now() + absl::Seconds(10);
      while (LogLines(log).size() < 5 && absl::Now() < end) absl::SleepFor(absl::Milliseconds(10));
      absl::SleepFor(absl::Milliseconds(100));
      cancel.Cancel();
    });
    CHECK(run(Lease("FAKE_HANG")).status() == v1::CANCELLED);
    canceller.join();
  }
  unsetenv("FAKE_PKB_EVAL_LOG");
  std::vector<std::string> lines = LogLines(log);
  REQUIRE(lines.size() == 5);
  CHECK(lines[0].find("standby=") == std::string::npos);
  // GPU jobs settle the node's baseline, on an engine of their own or the standby; CPU test
  // candidates do not.
  for (int i : {0, 1, 3, 4}) {
    CHECK(lines[i].find("settle=10") != std::string::npos);
    CHECK(lines[i].find("max_age=6") != std::string::npos);
  }
  CHECK(lines[2].find("settle=") == std::string::npos);
  CHECK(lines[2].find("max_age=") == std::string::npos);
  CHECK(lines[1].find("world=2") != std::string::npos);
  CHECK(lines[1].find("standby=2:cuda") != std::string::npos);
  CHECK(lines[2].find("standby=2:cuda") != std::string::npos);  // W = 4 of C++: ranks replaced
  CHECK(lines[3].find("standby=4:cpu") != std::string::npos);   // the shape of the last job
  CHECK(lines[4].find("standby=2:cuda") != std::string::npos);
  // No engine is left behind: the last standby was killed with the executor, its folder gone.
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(s.dir)) {
    if (e.path().filename().string().rfind("job-", 0) == 0) left.push_back(e.path());
  }
  CHECK(left.empty());
}

TEST_CASE("a standby engine that died does not lose the job", "[executor][standby]") {
  Scratch s;
  // Started as a standby it exits at once; otherwise it is the test double.
  const std::string engine = s.Script(
      "dies-in-standby.sh", std::string("case \"$*\" in *--standby*) exit 0 ;; esac\nexec ") +
                                PKB_FAKE_ENGINE + " \"$@\"\n");
  EngineExecutorOptions o{engine, s.dir};
  o.standby = true;
  EngineExecutor exec(o);
  CancelToken cancel;
  for (int i = 0; i < 2; ++i) {
    CHECK(exec.Run(
                  Lease("FAKE_OK"), [](const v1::EvalEvent&) {}, {}, {}, &cancel)
              .status() == v1::OK);
    // The standby dies at once: the next job finds it dead.
    const absl::Time end = absl::Now() + absl::Seconds(10);
    while (exec.standby_waiting() && absl::Now() < end) absl::SleepFor(absl::Milliseconds(10));
    REQUIRE_FALSE(exec.standby_waiting());
  }
}

TEST_CASE("a worker's share of the node's GPUs reaches every engine it starts as --gpus",
          "[executor][standby]") {
  Scratch s;
  const std::string log = s.dir + "/engine.log";
  setenv("FAKE_PKB_EVAL_LOG", log.c_str(), 1);
  const std::string args = s.dir + "/args";
  const std::string engine =
      s.Script("engine", "echo \"$@\" >> " + args + "\nexec " PKB_FAKE_ENGINE " \"$@\"\n");
  const std::string share =
      "GPU-11111111-2222-3333-4444-555555555555,GPU-66666666-7777-8888-9999-000000000000";
  EngineExecutorOptions o{engine, s.dir};
  o.standby = true;
  o.gpus = share;
  {
    EngineExecutor exec(o);
    CancelToken cancel;
    auto run = [&] {
      return exec
          .Run(
              Lease("FAKE_OK"), [](const v1::EvalEvent&) {}, {}, {}, &cancel)
          .status();
    };
    CHECK(run() == v1::OK);  // an engine of its own
    AwaitStandby(exec);
    CHECK(run() == v1::OK);  // the engine started ahead
    v1::CompileTask task;
    task.set_task_id("c1");
    task.mutable_spec()->set_problem_id(1);
    task.mutable_spec()->set_world_size(2);
    task.set_source("int f() { return 0; }");
    task.set_deadline_ms(30000);
    CHECK(exec.Compile(task, &cancel).status() == v1::COMPILED);
  }
  unsetenv("FAKE_PKB_EVAL_LOG");
  const std::vector<std::string> ran = LogLines(log);
  REQUIRE(ran.size() == 2);
  for (const std::string& line : ran) CHECK(line.find(" gpus=" + share + " ") != std::string::npos);
  CHECK(ran[1].find("standby=2:cuda") != std::string::npos);
  // Every start (the two jobs' engines, the compile's, and the standby engine waiting at the end).
  const std::vector<std::string> starts = LogLines(args);
  CHECK(starts.size() >= 3);
  for (const std::string& line : starts) {
    INFO(line);
    CHECK(line.find("--gpus=" + share) != std::string::npos);
  }
}

TEST_CASE(
    "an engine whose parent is no longer the worker once its death signal is armed never runs",
    "[executor]") {
  // The guard needs util-linux's setpriv (without it, the engine runs unguarded).
  REQUIRE(access("/usr/bin/setpriv", X_OK) == 0);
  // Started by this process, the worker: the engine runs.
  SubprocessOptions direct;
  direct.argv = EngineCommand("/bin/echo", /*background=*/false);
  direct.argv.push_back("the engine ran");
  absl::StatusOr<SubprocessResult> ran = RunSubprocess(direct);
  REQUIRE(ran.ok());
  CHECK(ran->exit_code == 0);
  CHECK(ran->out.find("the engine ran") != std::string::npos);
  // Started with another process between (as when the worker died and the shell was reparented
  // before setpriv armed the signal): the shell after setpriv sees another parent and exits.
  SubprocessOptions orphan;
  orphan.argv = {"/bin/sh", "-c", "\"$@\"; exit $?", "sh"};
  for (const std::string& a : direct.argv) orphan.argv.push_back(a);
  absl::StatusOr<SubprocessResult> stopped = RunSubprocess(orphan);
  REQUIRE(stopped.ok());
  CHECK(stopped->exit_code == 1);
  CHECK(stopped->out.find("PKB_WORKER_CHILD_PID") != std::string::npos);
  CHECK(stopped->out.find("the engine ran") == std::string::npos);
}

TEST_CASE("background engines run at nice 10 on the CPUs given, others as the worker does",
          "[executor]") {
  if (access("/usr/bin/taskset", X_OK) != 0 || access("/usr/bin/nice", X_OK) != 0) {
    WARN("util-linux's taskset or coreutils' nice is missing: nothing to check");
    return;
  }
  cpu_set_t own;
  REQUIRE(sched_getaffinity(0, sizeof(own), &own) == 0);
  int first = -1;
  for (int c = 0; c < CPU_SETSIZE && first < 0; ++c) {
    if (CPU_ISSET(c, &own)) first = c;
  }
  REQUIRE(first >= 0);
  const int own_nice = getpriority(PRIO_PROCESS, 0);
  auto read = [](std::vector<std::string> argv, const std::string& file) {
    argv.push_back(file);
    SubprocessOptions o;
    o.argv = argv;
    absl::StatusOr<SubprocessResult> r = RunSubprocess(o);
    REQUIRE(r.ok());
    REQUIRE(r->exit_code == 0);
    return r->out;
  };
  // /proc/self/stat of cat: its nice value is field 19, the 17th after the state.
  auto nice_of = [&](bool background) {
    const std::string out = read(EngineCommand("/bin/cat", background, {first}), "/proc/self/stat");
    std::vector<std::string> f = absl::StrSplit(out.substr(out.rfind(')') + 2), ' ');
    return std::stoi(f.at(16));
  };
  CHECK(nice_of(/*background=*/true) == std::min(own_nice + 10, 19));
  CHECK(nice_of(/*background=*/false) == own_nice);
  auto cpus_of = [&](bool background) {
    const std::string out =
        read(EngineCommand("/bin/cat", background, {first}), "/proc/self/status");
    const size_t at = out.find("Cpus_allowed_list:");
    REQUIRE(at != std::string::npos);
    return std::string(
        absl::StripAsciiWhitespace(out.substr(at + 18, out.find('\n', at) - at - 18)));
  };
  CHECK(cpus_of(/*background=*/true) == std::to_string(first));
  if (CPU_COUNT(&own) > 1) CHECK(cpus_of(/*background=*/false) != std::to_string(first));
}

// The state letter of /proc/<pid>/stat ('T' stopped), or 0 when the process is gone.
char StateOf(pid_t pid) {
  std::string stat;
  auto read = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  if (!read.ok()) return 0;
  stat = *read;
  const size_t close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() ? 0 : stat[close + 2];
}

TEST_CASE("a paused run stops its whole tree, other sessions included, and a cancel ends it",
          "[executor]") {
  const std::string dir = *MakeTempDir("/tmp/pkb-test", "pause-");
  // A shell (its own process group) with a child in the group and one in a session of its own,
  // as a compile's nvcc runs.
  SubprocessOptions o;
  o.argv = {"/bin/sh", "-c",
            absl::StrCat("echo $$ > ", dir, "/root; sleep 60 & setsid sh -c 'echo $$ > ", dir,
                         "/apart; exec sleep 60' & wait")};
  o.timeout = absl::Seconds(60);
  std::thread run([&] { (void)RunSubprocess(o); });
  pid_t root = 0, apart = 0;
  for (int i = 0; i < 500 && (root == 0 || apart == 0); ++i) {
    absl::SleepFor(absl::Milliseconds(10));
    auto r = ReadFile(dir + "/root");
    auto a = ReadFile(dir + "/apart");
    if (r.ok()) (void)absl::SimpleAtoi(absl::StripAsciiWhitespace(*r), &root);
    if (a.ok()) (void)absl::SimpleAtoi(absl::StripAsciiWhitespace(*a), &apart);
  }
  REQUIRE(root > 0);
  REQUIRE(apart > 0);
  CancelToken token;
  token.SetProcessGroup(root);
  // Signals land asynchronously: the state is awaited, for a second at most.
  auto await_state = [](pid_t pid, bool stopped) {
    for (int i = 0; i < 100 && (StateOf(pid) == 'T') != stopped; ++i) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    return (StateOf(pid) == 'T') == stopped;
  };
  token.Pause(true);
  CHECK(await_state(root, true));
  CHECK(await_state(apart, true));
  token.Pause(false);
  CHECK(await_state(root, false));
  CHECK(await_state(apart, false));
  // Paused, then cancelled: nothing is left stopped, the other session's process included.
  token.Pause(true);
  token.Cancel();
  run.join();
  for (int i = 0; i < 200 && StateOf(apart) != 0 && StateOf(apart) != 'Z'; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  CHECK((StateOf(apart) == 0 || StateOf(apart) == 'Z'));
  (void)RemoveTree(dir);
}

TEST_CASE("a pause waits for a starting run's process, and stops it once known", "[executor]") {
  const std::string dir = *MakeTempDir("/tmp/pkb-test", "pause-");
  SubprocessOptions o;
  o.argv = {"/bin/sh", "-c", absl::StrCat("echo $$ > ", dir, "/pid; exec sleep 60")};
  o.timeout = absl::Seconds(60);
  CancelToken token;
  std::thread run([&] { (void)RunSubprocess(o); });
  pid_t pid = 0;
  for (int i = 0; i < 500 && pid == 0; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
    if (auto r = ReadFile(dir + "/pid"); r.ok())
      (void)absl::SimpleAtoi(absl::StripAsciiWhitespace(*r), &pid);
  }
  REQUIRE(pid > 0);
  // The executor learns of the process 200 ms into the pause (as a shell's pid line comes).
  std::thread told([&] {
    absl::SleepFor(absl::Milliseconds(200));
    token.SetProcessGroup(pid);
  });
  const std::vector<pid_t> stopped = token.Pause(true);
  told.join();
  CHECK(stopped == std::vector<pid_t>{pid});
  for (int i = 0; i < 100 && StateOf(pid) != 'T'; ++i) absl::SleepFor(absl::Milliseconds(10));
  CHECK(StateOf(pid) == 'T');
  token.Cancel();
  run.join();
  // A run whose process never comes: the pause gives up after its wait and stops nothing.
  CancelToken never;
  const absl::Time t0 = absl::Now();
  CHECK(never.Pause(true).empty());
  CHECK(absl::Now() - t0 >= CancelToken::kProcessWait);
  (void)RemoveTree(dir);
}

TEST_CASE("at the timing, the engine is told how many compiles ran beside the job", "[executor]") {
  Scratch s;
  const std::string log = s.dir + "/engine.log";
  setenv("FAKE_PKB_EVAL_LOG", log.c_str(), 1);
  for (bool standby : {false, true}) {
    CAPTURE(standby);
    EngineExecutor exec({.engine = PKB_FAKE_ENGINE, .scratch = s.dir, .standby = standby});
    CancelToken cancel;
    std::vector<v1::Stage> seen;
    int asked = 0;
    const Executor::QuietCallback quiet = [&] {
      ++asked;
      seen.push_back(v1::DONE);  // marks when it ran among the events
      return 3;
    };
    const auto on_event = [&](const v1::EvalEvent& e) { seen.push_back(e.stage()); };
    // With standby, the first job starts the engine for the second.
    for (int job = 0; job < (standby ? 2 : 1); ++job) {
      if (job > 0) AwaitStandby(exec);
      asked = 0;
      seen.clear();
      v1::EvalResult r = exec.Run(Lease("FAKE_OK"), on_event, {}, quiet, &cancel);
      CHECK(r.status() == v1::OK);
      CHECK(r.compiles_beside() == 3);
      CHECK(asked == 1);
      REQUIRE(seen.size() >= 2);
      CHECK(seen[seen.size() - 2] == v1::DONE);  // asked right before the event goes on
      CHECK(seen.back() == v1::BENCHMARKING);
    }
    // No callback: nothing else runs (told 0 where the engine listens, or not asked at all).
    if (standby) AwaitStandby(exec);
    v1::EvalResult r = exec.Run(Lease("FAKE_OK"), on_event, {}, {}, &cancel);
    CHECK(r.status() == v1::OK);
    CHECK(r.compiles_beside() == 0);
  }
  // Two jobs without standby, then three with: the first on an engine of its own, the others on
  // engines started ahead (their log lines say so).
  const std::vector<std::string> lines = LogLines(log);
  REQUIRE(lines.size() == 5);
  for (int i = 0; i < 3; ++i) CHECK(lines[i].find("standby=") == std::string::npos);
  CHECK(lines[3].find("standby=2:cuda") != std::string::npos);
  CHECK(lines[4].find("standby=2:cuda") != std::string::npos);
  unsetenv("FAKE_PKB_EVAL_LOG");
}

}  // namespace
}  // namespace pkb
