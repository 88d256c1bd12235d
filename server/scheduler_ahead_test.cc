// Compile ahead (server/scheduler.h): queued jobs' sources compiled on busy workers that could run
// them, and the worker's first pick when it becomes idle. Fixture: server/scheduler_fixture.h.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "server/scheduler.h"
#include "server/scheduler_fixture.h"

namespace pkb {
namespace {

using testing::AddCompiler;
using testing::Fixture;
using testing::RecordingConnection;
using testing::Tasks;

// A scheduler with compile ahead on (SchedulerOptions.compile_ahead's default, said here so that
// these tests do not rest on it).
void AheadOn(Fixture& f) {
  f.options.compile_ahead = true;
  f.scheduler.reset();
  f.scheduler = std::make_unique<Scheduler>(f.store.get(), &f.clock, f.catalog.get(), f.options);
}

std::string Submit(Fixture& f, const std::string& source, const std::string& submitter = "") {
  v1::SubmitRequest r = Fixture::Request(source, 1);
  r.set_submitter(submitter);
  auto out = f.scheduler->Submit(r);
  REQUIRE(out.ok());
  return out->job_id;
}

std::vector<std::string> Sources(const RecordingConnection& c) {
  std::vector<std::string> out;
  for (const auto& t : Tasks(c)) out.push_back(t.source());
  return out;
}

// The worker's job ends (not OK: no confirmation run), and it is idle at once.
void Finish(Fixture& f, uint64_t conn, const RecordingConnection& c) {
  f.SendDone(conn, c.Leases().back(), v1::MISMATCH);
}

// The worker answers the last compile task it was sent.
void Answer(Fixture& f, uint64_t conn, const RecordingConnection& c) {
  v1::CompileTaskResult compiled;
  compiled.set_task_id(Tasks(c).back().task_id());
  compiled.mutable_result()->set_status(v1::COMPILED);
  REQUIRE(f.scheduler->OnCompileResult(conn, compiled).ok());
  f.scheduler->Flush();
}

// The worker answers every compile task it was sent (an answered one again: stale, ignored).
void AnswerAll(Fixture& f, uint64_t conn, const RecordingConnection& c) {
  for (const v1::CompileTask& t : Tasks(c)) {
    v1::CompileTaskResult compiled;
    compiled.set_task_id(t.task_id());
    compiled.mutable_result()->set_status(v1::COMPILED);
    REQUIRE(f.scheduler->OnCompileResult(conn, compiled).ok());
  }
  f.scheduler->Flush();
}

TEST_CASE("a queued job compiles ahead on a busy worker, which takes it first when idle",
          "[scheduler][ahead]") {
  Fixture f;
  AheadOn(f);
  auto x = AddCompiler(f, 1, "x", "h200", 1);
  auto y = AddCompiler(f, 2, "y", "h200", 1);
  const std::string a = Submit(f, "A"), b = Submit(f, "B");
  REQUIRE(x->Leases().size() == 1);
  REQUIRE(y->Leases().size() == 1);
  CHECK(x->Leases()[0].job_id() == a);
  CHECK(y->Leases()[0].job_id() == b);
  CHECK(Tasks(*x).empty());  // nothing waits yet
  const std::string c = Submit(f, "C"), d = Submit(f, "D"), e = Submit(f, "E");
  // One job ahead per worker, the oldest first; E waits without one.
  CHECK(Sources(*x) == std::vector<std::string>{"C"});
  CHECK(Sources(*y) == std::vector<std::string>{"D"});
  // The task is the job's: its spec as leased, with the coordinator's deadline.
  CHECK(Tasks(*x)[0].spec().problem_id() == 1);
  CHECK(Tasks(*x)[0].spec().world_size() == 1);
  CHECK(Tasks(*x)[0].deadline_ms() == 120000);
  CHECK(Tasks(*x)[0].ahead());  // nobody waits for it: a draining worker may stop it
  // A compile's answer leaves the mark: the worker still takes the job it compiled.
  v1::CompileTaskResult compiled;
  compiled.set_task_id(Tasks(*y)[0].task_id());
  compiled.mutable_result()->set_status(v1::COMPILED);
  REQUIRE(f.scheduler->OnCompileResult(2, compiled).ok());

  // y is idle first: it takes D, which it compiled, though C is older.
  Finish(f, 2, *y);
  REQUIRE(y->Leases().size() == 2);
  CHECK(y->Leases()[1].job_id() == d);
  CHECK(y->Leases()[1].source() == "D");
  // Busy again, unmarked: the next job without one (E) compiles ahead on it.
  CHECK(Sources(*y) == (std::vector<std::string>{"D", "E"}));
  CHECK(Sources(*x) == std::vector<std::string>{"C"});
  // x takes C, then y E: nothing is left to compile ahead.
  Finish(f, 1, *x);
  REQUIRE(x->Leases().size() == 2);
  CHECK(x->Leases()[1].job_id() == c);
  Finish(f, 2, *y);
  REQUIRE(y->Leases().size() == 3);
  CHECK(y->Leases()[2].job_id() == e);
  CHECK(Tasks(*x).size() == 1);
  CHECK(Tasks(*y).size() == 2);
  CHECK(f.scheduler->Stats().queued == 0);
}

TEST_CASE(
    "an idle worker takes the oldest job, compiled ahead elsewhere or not, and marks go "
    "with a cancel and a lost worker",
    "[scheduler][ahead]") {
  Fixture f;
  AheadOn(f);
  auto x = AddCompiler(f, 1, "x", "h200", 1);
  auto y = AddCompiler(f, 2, "y", "h200", 1);
  Submit(f, "A");
  Submit(f, "B");
  const std::string c = Submit(f, "C"), d = Submit(f, "D"), e = Submit(f, "E");
  REQUIRE(Sources(*x) == std::vector<std::string>{"C"});
  REQUIRE(Sources(*y) == std::vector<std::string>{"D"});
  // A new worker takes the head, C, compiled ahead on x, and compiles E ahead (busy, free). x's
  // mark went with C, but its compile of C still runs: one compile ahead of its own at a time.
  auto z = AddCompiler(f, 3, "z", "h200", 1);
  REQUIRE(z->Leases().size() == 1);
  CHECK(z->Leases()[0].job_id() == c);
  CHECK(Sources(*z) == std::vector<std::string>{"E"});
  CHECK(Sources(*x) == std::vector<std::string>{"C"});
  // E cancelled while queued: z's mark goes with it. A new job waits for a free worker: x, once
  // its compile ends.
  REQUIRE(f.scheduler->Cancel(e, "test").ok());
  const std::string g = Submit(f, "G");
  CHECK(Sources(*x) == std::vector<std::string>{"C"});
  Answer(f, 1, *x);
  CHECK(Sources(*x) == (std::vector<std::string>{"C", "G"}));
  // y is lost (its compile task with it): D goes ahead on z, once z's compile of E ends.
  f.scheduler->Disconnect(2, "test");
  f.scheduler->Flush();
  CHECK(Sources(*z) == std::vector<std::string>{"E"});
  Answer(f, 3, *z);
  CHECK(Sources(*z) == (std::vector<std::string>{"E", "D"}));
  Finish(f, 3, *z);
  REQUIRE(z->Leases().size() == 2);
  CHECK(z->Leases()[1].job_id() == d);
  Finish(f, 1, *x);
  REQUIRE(x->Leases().size() == 2);
  CHECK(x->Leases()[1].job_id() == g);
}

TEST_CASE("a worker with more compile slots compiles that many jobs ahead, less one for Checks",
          "[scheduler][ahead]") {
  Fixture f;
  AheadOn(f);
  auto x = AddCompiler(f, 1, "x", "h200", 3);  // two jobs ahead
  const std::string a = Submit(f, "A"), b = Submit(f, "B"), c = Submit(f, "C"), d = Submit(f, "D");
  REQUIRE(x->Leases().size() == 1);
  CHECK(x->Leases()[0].job_id() == a);
  // B and C compile ahead on x at once; D waits without one.
  CHECK(Sources(*x) == (std::vector<std::string>{"B", "C"}));
  // A Check goes beside them (and first on the worker, which keeps a slot for it).
  std::vector<CompileAnswer> answers;
  v1::EvalSpec spec;
  spec.set_problem_id(1);
  spec.set_world_size(1);
  spec.set_gpu_class("h200");
  f.scheduler->StartCompile(spec, "check", [&](CompileAnswer got) { answers.push_back(got); });
  CHECK(Sources(*x) == (std::vector<std::string>{"B", "C", "check"}));
  CHECK_FALSE(Tasks(*x).back().ahead());
  // Its compiles answered, x still holds its two marks: D waits on.
  AnswerAll(f, 1, *x);
  CHECK(answers.size() == 1);
  CHECK(Tasks(*x).size() == 3);
  // Idle, x takes the oldest it marked, B; a mark is free again, and D compiles ahead.
  Finish(f, 1, *x);
  REQUIRE(x->Leases().size() == 2);
  CHECK(x->Leases()[1].job_id() == b);
  CHECK(Sources(*x) == (std::vector<std::string>{"B", "C", "check", "D"}));
  SECTION("it takes the rest in order") {
    Finish(f, 1, *x);
    REQUIRE(x->Leases().size() == 3);
    CHECK(x->Leases()[2].job_id() == c);
    Finish(f, 1, *x);
    REQUIRE(x->Leases().size() == 4);
    CHECK(x->Leases()[3].job_id() == d);
  }
  SECTION("draining drops its marks: another busy worker compiles those jobs ahead") {
    auto y = AddCompiler(f, 2, "y", "h200", 3);
    // y takes C, the oldest queued, though x marked it; D stays x's.
    REQUIRE(y->Leases().size() == 1);
    CHECK(y->Leases()[0].job_id() == c);
    CHECK(Tasks(*y).empty());
    REQUIRE(f.scheduler->OnDrain(1, v1::Drain()).ok());
    f.scheduler->Flush();
    CHECK(Sources(*y) == std::vector<std::string>{"D"});
    const std::string e = Submit(f, "E");
    CHECK(Sources(*y) == (std::vector<std::string>{"D", "E"}));
    CHECK(Tasks(*x).size() == 4);
    Finish(f, 2, *y);
    REQUIRE(y->Leases().size() == 2);
    CHECK(y->Leases()[1].job_id() == d);
    Finish(f, 2, *y);
    REQUIRE(y->Leases().size() == 3);
    CHECK(y->Leases()[2].job_id() == e);
  }
}

TEST_CASE(
    "marks spread over busy workers, fewest first, and an idle one takes its oldest mark "
    "past another worker's",
    "[scheduler][ahead]") {
  Fixture f;
  AheadOn(f);
  auto x = AddCompiler(f, 1, "x", "h200", 3);  // two jobs ahead
  auto y = AddCompiler(f, 2, "y", "h200", 3);
  Submit(f, "A");
  Submit(f, "B");
  const std::string c = Submit(f, "C"), d = Submit(f, "D"), e = Submit(f, "E"), g = Submit(f, "G"),
                    h = Submit(f, "H");
  // One mark each before either gets a second: C and E on x, D and G on y; H waits.
  CHECK(Sources(*x) == (std::vector<std::string>{"C", "E"}));
  CHECK(Sources(*y) == (std::vector<std::string>{"D", "G"}));
  // Compiled: the compiles ahead in flight are no bound below.
  AnswerAll(f, 1, *x);
  AnswerAll(f, 2, *y);
  // x takes C (the head), then E, passing over D (y's) once; it marks H meanwhile.
  Finish(f, 1, *x);
  REQUIRE(x->Leases().size() == 2);
  CHECK(x->Leases()[1].job_id() == c);
  CHECK(Sources(*x) == (std::vector<std::string>{"C", "E", "H"}));
  Finish(f, 1, *x);
  REQUIRE(x->Leases().size() == 3);
  CHECK(x->Leases()[2].job_id() == e);
  // Next, though x compiled H, D goes first: passed over once already.
  Finish(f, 1, *x);
  REQUIRE(x->Leases().size() == 4);
  CHECK(x->Leases()[3].job_id() == d);
  // y takes its own G, then x's H.
  Finish(f, 2, *y);
  REQUIRE(y->Leases().size() == 2);
  CHECK(y->Leases()[1].job_id() == g);
  Finish(f, 2, *y);
  REQUIRE(y->Leases().size() == 3);
  CHECK(y->Leases()[2].job_id() == h);
  CHECK(f.scheduler->Stats().queued == 0);
}

TEST_CASE(
    "no compile ahead when off, without compile slots, past them, or on the worker a "
    "confirmation avoids",
    "[scheduler][ahead]") {
  SECTION("off") {
    Fixture f;
    CHECK(SchedulerOptions().compile_ahead);  // the default: on
    f.options.compile_ahead = false;
    f.scheduler.reset();
    f.scheduler = std::make_unique<Scheduler>(f.store.get(), &f.clock, f.catalog.get(), f.options);
    auto x = AddCompiler(f, 1, "x", "h200", 1);
    Submit(f, "A");
    Submit(f, "B");
    CHECK(Tasks(*x).empty());
    Finish(f, 1, *x);
    CHECK(x->Leases().back().source() == "B");
  }
  SECTION("a worker without compile slots") {
    Fixture f;
    AheadOn(f);
    auto x = AddCompiler(f, 1, "x", "h200", 0);
    Submit(f, "A");
    Submit(f, "B");
    CHECK(Tasks(*x).empty());
  }
  SECTION("its compile slots busy, then one free") {
    Fixture f;
    AheadOn(f);
    auto x = AddCompiler(f, 1, "x", "h200", 1);
    Submit(f, "A");
    std::vector<CompileAnswer> answers;
    v1::EvalSpec spec;
    spec.set_problem_id(1);
    spec.set_world_size(1);
    spec.set_gpu_class("h200");
    f.scheduler->StartCompile(spec, "check", [&](CompileAnswer a) { answers.push_back(a); });
    REQUIRE(Tasks(*x).size() == 1);
    CHECK_FALSE(Tasks(*x)[0].ahead());  // a Check's: its caller waits
    Submit(f, "B");
    CHECK(Tasks(*x).size() == 1);  // its one slot's task in flight: B waits without one
    Answer(f, 1, *x);
    REQUIRE(answers.size() == 1);
    CHECK(Sources(*x) == (std::vector<std::string>{"check", "B"}));
  }
  SECTION("a confirmation") {
    Fixture f;
    AheadOn(f);
    auto x = AddCompiler(f, 1, "x", "h200", 1);
    auto y = AddCompiler(f, 2, "y", "h200", 1);
    const std::string a = Submit(f, "A", "alice");
    Submit(f, "B", "bob");
    REQUIRE(x->Leases().size() == 1);
    REQUIRE(x->Leases()[0].job_id() == a);
    // x's verdict is OK, its engine still ending (`finishing`): busy, but not for A's
    // confirmation, which avoids x while y could run it.
    v1::Heartbeat finishing;
    finishing.set_healthy(true);
    finishing.set_finishing(true);
    REQUIRE(f.scheduler->OnHeartbeat(1, finishing).ok());
    v1::JobEvent je;
    je.set_job_id(a);
    je.set_attempt(1);
    je.mutable_event()->set_stage(v1::DONE);
    je.mutable_event()->mutable_result()->set_status(v1::OK);
    je.mutable_event()->mutable_result()->set_speedup(1.5);
    REQUIRE(f.scheduler->OnJobEvent(1, je).ok());
    f.scheduler->Flush();
    const std::string confirmation = f.scheduler->Get(a)->confirmation_job_id();
    REQUIRE_FALSE(confirmation.empty());
    CHECK(Tasks(*x).empty());
    CHECK(Sources(*y) == std::vector<std::string>{"A"});
    Finish(f, 2, *y);
    REQUIRE(y->Leases().size() == 2);
    CHECK(y->Leases()[1].job_id() == confirmation);
  }
}

TEST_CASE("a job passed over once for a job compiled ahead goes first after that",
          "[scheduler][ahead]") {
  Fixture f;
  AheadOn(f);
  auto x = AddCompiler(f, 1, "x", "h200", 1);
  auto y = AddCompiler(f, 2, "y", "h200", 1);
  Submit(f, "A");
  Submit(f, "B");
  const std::string o = Submit(f, "O"), p = Submit(f, "P"), q = Submit(f, "Q");
  REQUIRE(Sources(*x) == std::vector<std::string>{"O"});
  REQUIRE(Sources(*y) == std::vector<std::string>{"P"});
  // x holds O's mark and stays busy. y takes P, which it compiled, passing O over once.
  Answer(f, 2, *y);
  Finish(f, 2, *y);
  REQUIRE(y->Leases().size() == 2);
  CHECK(y->Leases()[1].job_id() == p);
  CHECK(Sources(*y) == (std::vector<std::string>{"P", "Q"}));
  // Next time, though it compiled Q, y takes O: no job is passed over twice.
  Answer(f, 2, *y);
  Finish(f, 2, *y);
  REQUIRE(y->Leases().size() == 3);
  CHECK(y->Leases()[2].job_id() == o);
  // x's mark went with O's lease; it takes the oldest left, Q.
  Finish(f, 1, *x);
  REQUIRE(x->Leases().size() == 2);
  CHECK(x->Leases()[1].job_id() == q);
}

TEST_CASE("a draining or unhealthy worker's compile-ahead mark goes to another busy worker",
          "[scheduler][ahead]") {
  Fixture f;
  AheadOn(f);
  auto x = AddCompiler(f, 1, "x", "h200", 1);
  auto y = AddCompiler(f, 2, "y", "h200", 1);
  Submit(f, "A");
  Submit(f, "B");
  const std::string c = Submit(f, "C");
  REQUIRE(Sources(*x) == std::vector<std::string>{"C"});
  CHECK(Tasks(*y).empty());
  SECTION("draining") {
    REQUIRE(f.scheduler->OnDrain(1, v1::Drain()).ok());
    f.scheduler->Flush();
  }
  SECTION("unhealthy") {
    v1::Heartbeat sick;
    sick.set_healthy(false);
    sick.add_running_job_ids(x->Leases()[0].job_id());
    REQUIRE(f.scheduler->OnHeartbeat(1, sick).ok());
    f.scheduler->Flush();
  }
  CHECK(Sources(*y) == std::vector<std::string>{"C"});
  Finish(f, 1, *x);
  CHECK(x->Leases().size() == 1);  // nothing more for it
  Finish(f, 2, *y);
  REQUIRE(y->Leases().size() == 2);
  CHECK(y->Leases()[1].job_id() == c);
}

}  // namespace
}  // namespace pkb
