#include "server/leaderboard.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/files.h"
#include "server/sqlite_job_store.h"

namespace pkb {
namespace {

constexpr const char* kCatalog = R"json({"problems":[
 {"id":1,"slug":"1_allreduce","version":1,"layouts":[{"worldSize":2,"supported":true},
   {"worldSize":4,"supported":true},{"worldSize":3,"supported":false}]},
 {"id":2,"slug":"2_allgather","version":1,"layouts":[{"worldSize":2,"supported":true}]},
 {"id":3,"slug":"3_broadcast","version":1,"layouts":[{"worldSize":2,"supported":true}]}]})json";

// A store on a real SQLite file and a helper to add finished jobs to it.
struct Fixture {
  Fixture()
      : dir(*MakeTempDir("/tmp", "pkb-lb-test")),
        store(*SqliteJobStore::Open(dir + "/jobs.db")),
        catalog(*ProblemCatalogIndex::FromJson(kCatalog)) {}
  ~Fixture() {
    store.reset();
    RemoveTree(dir).IgnoreError();
  }
  struct Spec {
    int problem = 1;
    int w = 2;
    double speedup = 1;
    std::string user = "alice";
    v1::Status status = v1::OK;
    std::string model = "m1";
    std::string source;  // default: unique per job
    bool ranked = false;
    std::string gpu_class = "h200";
    std::string cached_from;
    std::string tag;
    std::string confirms;      // a confirmation run of this job
    std::string confirmation;  // the job that confirms this one
    v1::Stage stage = v1::DONE;
    bool practice = false;
    bool functional = false;
    int64_t m = 0, n = 0;                 // the shape (0: the request leaves it unset)
    bool shape_run = false;               // a shape run of `confirms`
    std::vector<std::string> shape_jobs;  // this job's shape runs
  };
  std::string Add(const Spec& s) {
    v1::Job job;
    std::string id = "j" + std::to_string(++n);
    job.set_job_id(id);
    job.set_job_key("key-" + id);
    job.set_source_sha256(s.source.empty() ? "sha-" + id : s.source);
    job.set_stage(s.stage);
    job.set_gpu_class(s.gpu_class);
    job.set_cached_from_job_id(s.cached_from);
    job.set_confirms_job_id(s.confirms);
    job.set_confirmation_job_id(s.confirmation);
    job.set_shape_run(s.shape_run);
    for (const std::string& id : s.shape_jobs) job.add_shape_job_ids(id);
    job.set_created_unix_micros(n * 1000 - 500);
    job.set_updated_unix_micros(n * 1000);
    auto* r = job.mutable_request();
    r->set_problem_id(s.problem);
    r->set_world_size(s.w);
    r->set_dtype("bfloat16");
    r->set_gpu_class("any");
    r->set_submitter(s.user);
    r->set_model(s.model);
    r->set_agent("agent-x");
    r->set_ranked(s.ranked);
    r->set_practice(s.practice);
    r->set_functional(s.functional);
    r->set_m(s.m);
    r->set_n(s.n);
    if (!s.tag.empty()) r->add_tags(s.tag);
    r->set_source("__global__ void k() {} // " + id);
    if (s.stage != v1::DONE) {
      REQUIRE(store->CreateJob(job, nullptr).ok());
      return id;
    }
    auto* res = job.mutable_result();
    res->set_status(s.status);
    res->set_speedup(s.status == v1::OK ? s.speedup : 0);
    res->mutable_candidate()->set_median_us(10);
    res->mutable_baseline()->set_median_us(10 * s.speedup);
    v1::EvalEvent e;
    e.set_job_id(id);
    e.set_sequence(1);
    e.set_stage(v1::QUEUED);
    REQUIRE(store->CreateJob(job, &e).ok());
    e.set_sequence(2);
    e.set_stage(v1::DONE);
    *e.mutable_result() = job.result();
    REQUIRE(store->UpdateJob(job, &e).ok());
    return id;
  }
  v1::LeaderboardAnswer Query(v1::LeaderboardQuery q) {
    auto a = QueryLeaderboard(store.get(), &catalog, q);
    REQUIRE(a.ok());
    return *a;
  }

  std::string dir;
  std::unique_ptr<SqliteJobStore> store;
  ProblemCatalogIndex catalog;
  int n = 0;
};

TEST_CASE("boards hold the best result per user, best first", "[leaderboard]") {
  Fixture f;
  f.Add({.speedup = 1.2, .user = "alice"});
  std::string best_alice = f.Add({.speedup = 2.0, .user = "alice"});
  std::string bob = f.Add({.speedup = 1.5, .user = "bob", .model = "m2"});
  f.Add({.speedup = 3.0, .user = "carol", .status = v1::MISMATCH});  // not OK: never ranks
  f.Add({.w = 4, .speedup = 9.0, .user = "bob"});                    // another board
  f.Add({.speedup = 5.0, .user = "dave", .gpu_class = "h100"});      // another board
  v1::LeaderboardQuery q;
  q.mutable_filter()->set_problem_id(1);
  v1::LeaderboardAnswer a = f.Query(q);
  REQUIRE(a.boards_size() == 3);
  const v1::Board& b = a.boards(0);  // (1, W=2, bfloat16, h100) sorts before h200
  CHECK(b.gpu_class() == "h100");
  const v1::Board& h200 = a.boards(1);
  CHECK(h200.problem_slug() == "1_allreduce");
  REQUIRE(h200.entries_size() == 2);
  CHECK(h200.entries(0).job_id() == best_alice);
  CHECK(h200.entries(0).rank() == 1);
  CHECK(h200.entries(0).results() == 2);
  CHECK(h200.entries(0).speedup() == 2.0);
  CHECK(h200.entries(1).job_id() == bob);
  CHECK(h200.entries(1).rank() == 2);
  CHECK(a.boards(2).world_size() == 4);
  CHECK(a.ranking_results() == 5);
  q.set_limit(1);
  CHECK(f.Query(q).boards(1).entries_size() == 1);
  // Per model: alice's and bob's results are both m1 / m2 ...
  q.set_limit(0);
  q.set_group_by(v1::GROUP_BY_MODEL);
  a = f.Query(q);
  REQUIRE(a.boards(1).entries_size() == 2);
  CHECK(a.boards(1).entries(0).model() == "m1");
  CHECK(a.boards(1).entries(1).model() == "m2");
  // Filters.
  q.mutable_filter()->set_gpu_class("h100");
  CHECK(f.Query(q).boards_size() == 1);
  q.mutable_filter()->clear_gpu_class();
  q.mutable_filter()->set_world_size(4);
  CHECK(f.Query(q).boards(0).entries(0).speedup() == 9.0);
  q.mutable_filter()->set_world_size(0);
  q.mutable_filter()->set_from_unix_micros(3000);  // j3 onwards
  q.mutable_filter()->set_to_unix_micros(5000);    // before j5
  a = f.Query(q);
  REQUIRE(a.boards_size() == 1);
  CHECK(a.boards(0).entries(0).job_id() == bob);
}

TEST_CASE("cached copies, rejected sources and secret-seed failures never rank", "[leaderboard]") {
  Fixture f;
  std::string original = f.Add({.speedup = 1.5, .user = "alice"});
  f.Add({.speedup = 1.5, .user = "mallory", .source = "sha-j1", .cached_from = original});
  // A source that passed at W=2 but was caught cheating at W=4: out at every world size.
  f.Add({.speedup = 7.0, .user = "eve", .source = "cheat"});
  f.Add({.w = 4, .user = "eve", .status = v1::REJECTED, .source = "cheat"});
  // The same source on another problem is not touched.
  std::string other = f.Add({.problem = 2, .speedup = 7.0, .user = "eve", .source = "cheat"});
  // Passes the public seeds, fails the secret one.
  std::string tuned = f.Add({.speedup = 4.0, .user = "trent", .source = "tuned"});
  f.Add({.user = "trent", .status = v1::MISMATCH, .source = "tuned", .ranked = true});
  // A public-seed failure disqualifies nothing; nor does the service's own failure.
  f.Add({.speedup = 3.0, .user = "peggy", .source = "flaky"});
  f.Add({.user = "peggy", .status = v1::MISMATCH, .source = "flaky"});
  f.Add({.user = "peggy", .status = v1::WORKER_LOST, .source = "flaky", .ranked = true});
  // A functional run never ranks, and a rejected one disqualifies nothing.
  std::string tried = f.Add({.speedup = 9.0, .user = "victor", .functional = true});
  f.Add({.speedup = 2.5, .user = "walter", .source = "trial"});
  f.Add({.w = 4, .user = "walter", .status = v1::REJECTED, .source = "trial", .functional = true});

  v1::LeaderboardQuery q;
  q.mutable_filter()->set_problem_id(1);
  q.mutable_filter()->set_world_size(2);
  v1::LeaderboardAnswer a = f.Query(q);
  REQUIRE(a.boards_size() == 1);
  std::vector<std::string> users;
  for (const auto& e : a.boards(0).entries()) users.push_back(e.submitter());
  CHECK(users == std::vector<std::string>{"peggy", "walter", "alice"});
  CHECK(a.disqualified_results() == 2);
  q.mutable_filter()->set_problem_id(2);
  CHECK(f.Query(q).boards(0).entries(0).job_id() == other);

  auto sub = GetSubmission(f.store.get(), tuned, /*include_source=*/false);
  REQUIRE(sub.ok());
  CHECK(!sub->ranks());
  CHECK(sub->not_ranked_reason().find("secret") != std::string::npos);
  CHECK(sub->events_size() == 2);
  CHECK(sub->job().request().source().empty());
  sub = GetSubmission(f.store.get(), "j2", true);
  REQUIRE(sub.ok());
  CHECK(!sub->ranks());
  CHECK(sub->not_ranked_reason().find("cached copy") != std::string::npos);
  CHECK(sub->job().request().source() == "__global__ void k() {} // j2");
  sub = GetSubmission(f.store.get(), tried, false);
  REQUIRE(sub.ok());
  CHECK(!sub->ranks());
  CHECK(sub->not_ranked_reason().find("functional run") != std::string::npos);
  sub = GetSubmission(f.store.get(), original, false);
  CHECK(sub->ranks());
  CHECK(GetSubmission(f.store.get(), "nope", false).status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("seeds: public, secret or any", "[leaderboard]") {
  Fixture f;
  f.Add({.speedup = 2.0, .user = "alice"});
  f.Add({.speedup = 1.5, .user = "bob", .ranked = true});
  v1::LeaderboardQuery q;
  CHECK(f.Query(q).boards(0).entries_size() == 2);
  q.mutable_filter()->set_seeds(v1::SEEDS_SECRET);
  REQUIRE(f.Query(q).boards(0).entries_size() == 1);
  CHECK(f.Query(q).boards(0).entries(0).submitter() == "bob");
  CHECK(f.Query(q).boards(0).entries(0).ranked());
  q.mutable_filter()->set_seeds(v1::SEEDS_PUBLIC);
  CHECK(f.Query(q).boards(0).entries(0).submitter() == "alice");
}

TEST_CASE("suite: fast_p counts unsolved tasks as not fast, geomean over solved ones",
          "[leaderboard]") {
  Fixture f;
  // Tasks at W=2: (1,2), (2,2), (3,2). m1 solves two, m2 one.
  f.Add({.problem = 1, .speedup = 1.2, .model = "m1"});
  f.Add({.problem = 1, .speedup = 2.5, .model = "m1"});
  f.Add({.problem = 2, .speedup = 0.5, .model = "m1"});
  f.Add({.problem = 3, .speedup = 1.6, .model = "m2"});
  f.Add({.problem = 3, .status = v1::MISMATCH, .model = "m2"});
  f.Add({.problem = 1, .w = 4, .speedup = 8, .model = "m2"});  // not a W=2 task
  v1::SuiteQuery q;
  q.mutable_filter()->set_world_size(2);
  auto a = QuerySuite(f.store.get(), f.catalog, q);
  REQUIRE(a.ok());
  CHECK(a->tasks() == 3);
  REQUIRE(a->models_size() == 2);
  const v1::ModelScore& m1 = a->models(0);  // fast_1: m1 1/3, m2 1/3; geomean m2 1.6 > m1 1.118
  const v1::ModelScore& m2 = a->models(1);
  CHECK(m1.model() == "m2");
  CHECK(m2.model() == "m1");
  REQUIRE(m2.fast_p_size() == 4);
  CHECK(m2.tasks_correct() == 2);
  CHECK(m2.fast_p(0).p() == 0);
  CHECK(m2.fast_p(0).fast_p() == Approx(2.0 / 3));
  CHECK(m2.fast_p(1).p() == 1);
  CHECK(m2.fast_p(1).fast_p() == Approx(1.0 / 3));
  CHECK(m2.fast_p(2).p() == 1.5);
  CHECK(m2.fast_p(2).tasks_fast() == 1);
  CHECK(m2.fast_p(3).p() == 2);
  CHECK(m2.fast_p(3).tasks_fast() == 1);  // 2.5 > 2
  CHECK(m2.geomean_speedup() == Approx(std::sqrt(2.5 * 0.5)));
  REQUIRE(m2.best_size() == 2);
  CHECK(m2.best(0).speedup() == 2.5);
  CHECK(m2.best(1).problem_slug() == "2_allgather");
  CHECK(m1.tasks_correct() == 1);
  CHECK(m1.fast_p(3).tasks_fast() == 0);
  CHECK(m1.geomean_speedup() == Approx(1.6));
  // Every supported world size is a task without the filter: (1,2), (1,4), (2,2), (3,2).
  q.mutable_filter()->set_world_size(0);
  q.add_p(1.0);
  a = QuerySuite(f.store.get(), f.catalog, q);
  REQUIRE(a.ok());
  CHECK(a->tasks() == 4);
  CHECK(a->models(0).model() == "m2");  // fast_1: m2 2/4 > m1 1/4
  CHECK(a->models(0).fast_p_size() == 1);
  CHECK(a->models(0).fast_p(0).fast_p() == Approx(0.5));
  // A subset of the suite.
  q.add_problem_ids(3);
  a = QuerySuite(f.store.get(), f.catalog, q);
  CHECK(a->tasks() == 1);
  CHECK(a->models_size() == 1);
}

TEST_CASE("submissions are listed newest first and narrowed by tag", "[leaderboard]") {
  Fixture f;
  f.Add({.user = "alice", .tag = "exp1"});
  f.Add({.user = "bob", .tag = "exp1"});
  f.Add({.user = "alice", .status = v1::COMPILE_ERROR, .tag = "exp2"});
  v1::ListSubmissionsRequest r;
  r.mutable_filter()->set_submitter("alice");
  auto a = ListSubmissions(f.store.get(), &f.catalog, r);
  REQUIRE(a.ok());
  REQUIRE(a->submissions_size() == 2);
  CHECK(a->submissions(0).job_id() == "j3");
  CHECK(a->submissions(0).status() == v1::COMPILE_ERROR);
  CHECK(a->submissions(1).problem_slug() == "1_allreduce");
  CHECK(a->submissions(1).agent() == "agent-x");
  r.mutable_filter()->clear_submitter();
  r.mutable_filter()->set_tag("exp1");
  a = ListSubmissions(f.store.get(), &f.catalog, r);
  CHECK(a->submissions_size() == 2);
  r.set_limit(1);
  CHECK(ListSubmissions(f.store.get(), &f.catalog, r)->submissions_size() == 1);
}

}  // namespace
}  // namespace pkb

namespace pkb {
namespace {

// Not run by default: `server_test "[.bench]"` times the leaderboard over a large store.
TEST_CASE("leaderboard queries over 50,000 finished jobs", "[.bench]") {
  Fixture f;
  const int kJobs = 50'000;
  absl::Time start = absl::Now();
  for (int i = 0; i < kJobs; ++i) {
    v1::Job job;
    std::string id = absl::StrCat("b", i);
    job.set_job_id(id);
    job.set_job_key(id);
    job.set_source_sha256(id);
    job.set_stage(v1::DONE);
    job.set_gpu_class("h200");
    job.set_updated_unix_micros(i + 1);
    auto* r = job.mutable_request();
    r->set_problem_id(1 + i % 3);
    r->set_world_size(2);
    r->set_dtype("bfloat16");
    r->set_submitter(absl::StrCat("user", i % 50));
    r->set_model(absl::StrCat("model", i % 7));
    r->set_source("x");
    job.mutable_result()->set_status(i % 4 ? v1::OK : v1::MISMATCH);
    job.mutable_result()->set_speedup(0.5 + (i % 97) / 32.0);
    f.store->Write(JobWrite{job, true, std::nullopt}, [](const absl::Status&) {});
  }
  v1::Job last;
  last.set_job_id("last");
  REQUIRE(f.store->CreateJob(last, nullptr).ok());  // waits for every write queued before it
  WARN("insert " << kJobs << " jobs: " << absl::ToDoubleSeconds(absl::Now() - start) << " s");
  for (int problem : {0, 1}) {
    v1::LeaderboardQuery q;
    q.mutable_filter()->set_problem_id(problem);
    start = absl::Now();
    v1::LeaderboardAnswer a = f.Query(q);
    WARN("leaderboard problem=" << problem << ": " << a.ranking_results() << " results in "
                                << absl::ToDoubleMilliseconds(absl::Now() - start) << " ms");
  }
  v1::SuiteQuery sq;
  sq.mutable_filter()->set_world_size(2);
  start = absl::Now();
  auto s = QuerySuite(f.store.get(), f.catalog, sq);
  REQUIRE(s.ok());
  WARN("suite: " << s->models_size() << " models in "
                 << absl::ToDoubleMilliseconds(absl::Now() - start) << " ms");
}

}  // namespace
}  // namespace pkb

namespace pkb {
namespace {

// An original and its confirmation run: `Confirmed` adds both, the run's id named in the original.
struct Pair {
  std::string original, confirmation;
};
Pair Confirmed(Fixture& f, Fixture::Spec original, Fixture::Spec confirmation) {
  // Ids are handed out in order: the confirmation will be the next but one.
  std::string next = "j" + std::to_string(f.n + 2);
  original.confirmation = next;
  Pair p;
  p.original = f.Add(original);
  confirmation.confirms = p.original;
  confirmation.user = original.user;
  confirmation.model = original.model;
  confirmation.problem = original.problem;
  confirmation.w = original.w;
  confirmation.ranked = original.ranked;
  confirmation.source = original.source.empty() ? "sha-" + p.original : original.source;
  p.confirmation = f.Add(confirmation);
  REQUIRE(p.confirmation == next);
  return p;
}

TEST_CASE("boards rank confirmed results with the lower of the two speedups", "[leaderboard]") {
  Fixture f;
  // alice's lucky run: 3.0, confirmed at 1.6. bob: 2.0 then 2.2. carol: before confirmation runs.
  Pair alice = Confirmed(f, {.speedup = 3.0, .user = "alice"}, {.speedup = 1.6});
  Pair bob = Confirmed(f, {.speedup = 2.0, .user = "bob", .model = "m2"}, {.speedup = 2.2});
  std::string carol = f.Add({.speedup = 1.8, .user = "carol", .model = "m3"});
  v1::LeaderboardQuery q;
  q.mutable_filter()->set_problem_id(1);
  v1::LeaderboardAnswer a = f.Query(q);
  REQUIRE(a.boards_size() == 1);
  const v1::Board& b = a.boards(0);
  REQUIRE(b.entries_size() == 3);
  CHECK(b.entries(0).job_id() == bob.original);
  CHECK(b.entries(0).speedup() == 2.0);
  CHECK(b.entries(0).confirmation().state() == v1::CONFIRMED);
  CHECK(b.entries(0).confirmation().first_speedup() == 2.0);
  CHECK(b.entries(0).confirmation().confirmation_speedup() == 2.2);
  CHECK(b.entries(0).confirmation().job_id() == bob.confirmation);
  CHECK(b.entries(1).job_id() == carol);
  CHECK(b.entries(1).confirmation().state() == v1::UNCONFIRMED);
  CHECK(b.entries(2).job_id() == alice.original);  // 1.6, not 3.0
  CHECK(b.entries(2).speedup() == 1.6);
  // The medians are the run's whose figure it is: the confirmation's baseline of 16 us.
  CHECK(b.entries(2).baseline_median_us() == 16);
  CHECK(b.pending_size() == 0);
  CHECK(a.ranking_results() == 3);  // a confirmation run is no result of its own
  // The suite counts the same figure.
  v1::SuiteQuery sq;
  sq.mutable_filter()->set_problem_id(1);
  sq.mutable_filter()->set_world_size(2);
  auto suite = QuerySuite(f.store.get(), f.catalog, sq);
  REQUIRE(suite.ok());
  for (const v1::ModelScore& m : suite->models()) {
    REQUIRE(m.best_size() == 1);
    if (m.model() == "m1") CHECK(m.best(0).speedup() == 1.6);
    if (m.model() == "m2") CHECK(m.best(0).speedup() == 2.0);
  }
  auto sub = GetSubmission(f.store.get(), alice.original, false);
  REQUIRE(sub.ok());
  CHECK(sub->ranks());
  CHECK(sub->confirmation().state() == v1::CONFIRMED);
  CHECK(sub->confirmation().speedup() == 1.6);
  sub = GetSubmission(f.store.get(), alice.confirmation, false);
  REQUIRE(sub.ok());
  CHECK(!sub->ranks());
  CHECK(sub->not_ranked_reason().find("confirmation run of job " + alice.original) !=
        std::string::npos);
  CHECK(sub->confirmation().state() == v1::CONFIRMATION_NONE);
}

TEST_CASE("a pending confirmation keeps a result off the ranks and is shown apart",
          "[leaderboard]") {
  Fixture f;
  Pair old = Confirmed(f, {.speedup = 1.5, .user = "alice"}, {.speedup = 1.4});
  // alice's better result waits for its run; her worse one waits too, and is not shown.
  Pair better = Confirmed(f, {.speedup = 2.5, .user = "alice"}, {.stage = v1::QUEUED});
  Confirmed(f, {.speedup = 1.2, .user = "alice"}, {.stage = v1::BENCHMARKING});
  Pair dave = Confirmed(f, {.speedup = 1.1, .user = "dave"}, {.stage = v1::QUEUED});
  v1::LeaderboardQuery q;
  v1::LeaderboardAnswer a = f.Query(q);
  REQUIRE(a.boards_size() == 1);
  const v1::Board& b = a.boards(0);
  REQUIRE(b.entries_size() == 1);
  CHECK(b.entries(0).job_id() == old.original);
  CHECK(b.entries(0).speedup() == 1.4);
  REQUIRE(b.pending_size() == 2);
  CHECK(b.pending(0).job_id() == better.original);
  CHECK(b.pending(0).speedup() == 2.5);
  CHECK(b.pending(0).rank() == 0);
  CHECK(b.pending(0).confirmation().state() == v1::CONFIRMATION_PENDING);
  CHECK(b.pending(1).job_id() == dave.original);  // no ranked entry yet: shown
  CHECK(a.pending_results() == 3);
  CHECK(a.ranking_results() == 1);
  auto sub = GetSubmission(f.store.get(), better.original, false);
  REQUIRE(sub.ok());
  CHECK(!sub->ranks());
  CHECK(sub->not_ranked_reason() ==
        "awaiting its confirmation run (job " + better.confirmation + ", queued)");
  // A board with pending results only.
  q.mutable_filter()->set_submitter("dave");
  a = f.Query(q);
  REQUIRE(a.boards_size() == 1);
  CHECK(a.boards(0).entries_size() == 0);
  CHECK(a.boards(0).pending_size() == 1);
  CHECK(a.boards(0).problem_slug() == "1_allreduce");
}

TEST_CASE("a confirmation run that is not OK keeps its result off the boards and says why",
          "[leaderboard]") {
  Fixture f;
  Pair lost = Confirmed(f, {.speedup = 2.0, .user = "alice"}, {.status = v1::WORKER_LOST});
  Pair cancelled = Confirmed(f, {.speedup = 2.1, .user = "bob"}, {.status = v1::CANCELLED});
  // A ranked source that fails its confirmation on fresh secret inputs fails the secret seed.
  Pair flaky =
      Confirmed(f, {.speedup = 3.0, .user = "carol", .ranked = true}, {.status = v1::MISMATCH});
  std::string gone = f.Add({.speedup = 4.0, .user = "dave", .confirmation = "j999"});
  std::string fine = f.Add({.speedup = 1.1, .user = "erin"});
  v1::LeaderboardAnswer a = f.Query({});
  REQUIRE(a.boards_size() == 1);
  REQUIRE(a.boards(0).entries_size() == 1);
  CHECK(a.boards(0).entries(0).job_id() == fine);
  CHECK(a.boards(0).pending_size() == 0);
  CHECK(a.unconfirmed_results() == 3);
  CHECK(a.disqualified_results() == 1);  // carol's source failed a ranked run
  auto reason = [&](const std::string& id) {
    auto sub = GetSubmission(f.store.get(), id, false);
    REQUIRE(sub.ok());
    CHECK(!sub->ranks());
    return sub->not_ranked_reason();
  };
  CHECK(reason(lost.original) ==
        "its confirmation run (job " + lost.confirmation + ") ended WORKER_LOST");
  CHECK(reason(cancelled.original).find("ended CANCELLED") != std::string::npos);
  CHECK(reason(flaky.original).find("failed a ranked") != std::string::npos);
  CHECK(reason(gone) == "its confirmation run (job j999) is not in the store");
  auto sub = GetSubmission(f.store.get(), lost.original, false);
  CHECK(sub->confirmation().state() == v1::CONFIRMATION_FAILED);
  CHECK(sub->confirmation().confirmation_status() == v1::WORKER_LOST);
}

TEST_CASE("practice runs never rank and never disqualify their source", "[leaderboard][practice]") {
  Fixture f;
  // A practice run of source S ended REJECTED; a real run of S that is OK still ranks, and a
  // fast practice run does not.
  f.Add({.speedup = 0, .user = "alice", .status = v1::REJECTED, .source = "S", .practice = true});
  std::string fast_practice = f.Add({.speedup = 9.0, .user = "alice", .practice = true});
  std::string real = f.Add({.speedup = 1.5, .user = "alice", .source = "S"});
  v1::LeaderboardAnswer a = f.Query({});
  REQUIRE(a.boards_size() == 1);
  REQUIRE(a.boards(0).entries_size() == 1);
  CHECK(a.boards(0).entries(0).job_id() == real);
  CHECK(a.disqualified_results() == 0);
  CHECK(a.ranking_results() == 1);
  auto sub = GetSubmission(f.store.get(), fast_practice, false);
  REQUIRE(sub.ok());
  CHECK(!sub->ranks());
  CHECK(sub->not_ranked_reason().find("a practice submission") == 0);
  CHECK(sub->confirmation().state() == v1::CONFIRMATION_NONE);
  // A REJECTED run that is not practice still disqualifies.
  f.Add({.speedup = 0, .user = "alice", .status = v1::REJECTED, .source = "S"});
  a = f.Query({});
  CHECK(a.boards_size() == 0);
  CHECK(a.disqualified_results() == 1);
}

// An original, its confirmation run and its shape runs, in that order of ids.
struct Shaped {
  std::string original, confirmation;
  std::vector<std::string> shapes;
};
Shaped WithShapes(Fixture& f, Fixture::Spec original, Fixture::Spec confirmation,
                  std::vector<Fixture::Spec> shapes) {
  original.ranked = true;
  original.m = original.n = 1024;
  original.confirmation = "j" + std::to_string(f.n + 2);
  for (size_t i = 0; i < shapes.size(); ++i)
    original.shape_jobs.push_back("j" + std::to_string(f.n + 3 + i));
  Shaped out;
  out.original = f.Add(original);
  auto run_of = [&](Fixture::Spec run) {
    run.confirms = out.original;
    run.user = original.user;
    run.model = original.model;
    run.problem = original.problem;
    run.w = original.w;
    run.ranked = true;
    run.source = "sha-" + out.original;
    if (run.m == 0) run.m = original.m;
    if (run.n == 0) run.n = original.n;
    return f.Add(run);
  };
  out.confirmation = run_of(confirmation);
  REQUIRE(out.confirmation == original.confirmation);
  for (Fixture::Spec s : shapes) {
    s.shape_run = true;
    out.shapes.push_back(run_of(s));
  }
  REQUIRE(out.shapes == original.shape_jobs);
  return out;
}

TEST_CASE("a result with shape runs ranks with the geometric mean over its shapes",
          "[leaderboard][shapes]") {
  Fixture f;
  // alice: 2.0, confirmed at 1.8 (the default shape's 1.8), then 1.2 and 1.5 at two more shapes.
  Shaped alice = WithShapes(f, {.speedup = 2.0, .user = "alice"}, {.speedup = 1.8},
                            {{.speedup = 1.2, .m = 512, .n = 2048}, {.speedup = 1.5, .m = 1536}});
  // bob: faster everywhere but on one shape; a plain confirmed result of before shape runs.
  std::string bob = Confirmed(f, {.speedup = 1.45, .user = "bob"}, {.speedup = 1.5}).original;
  v1::LeaderboardQuery q;
  v1::LeaderboardAnswer a = f.Query(q);
  REQUIRE(a.boards_size() == 1);
  const v1::Board& b = a.boards(0);
  REQUIRE(b.entries_size() == 2);
  const double geomean = std::cbrt(1.8 * 1.2 * 1.5);  // 1.4797
  CHECK(b.entries(0).job_id() == alice.original);
  CHECK(b.entries(0).speedup() == Approx(geomean));
  const v1::Confirmation& c = b.entries(0).confirmation();
  CHECK(c.state() == v1::CONFIRMED);
  CHECK(c.speedup() == Approx(geomean));
  CHECK(c.first_speedup() == 2.0);
  CHECK(c.confirmation_speedup() == 1.8);
  REQUIRE(c.shapes_size() == 3);
  CHECK(c.shapes(0).job_id() == alice.original);
  CHECK(c.shapes(0).m() == 1024);
  CHECK(c.shapes(0).speedup() == 1.8);
  CHECK(c.shapes(1).job_id() == alice.shapes[0]);
  CHECK(c.shapes(1).m() == 512);
  CHECK(c.shapes(1).n() == 2048);
  CHECK(c.shapes(1).stage() == v1::DONE);
  CHECK(c.shapes(1).status() == v1::OK);
  CHECK(c.shapes(1).speedup() == 1.2);
  CHECK(c.shapes(2).m() == 1536);
  CHECK(c.shapes(2).n() == 1024);
  CHECK(c.shapes(2).speedup() == 1.5);
  // The medians stay the default shape's figure run's (the confirmation: baseline 18 us).
  CHECK(b.entries(0).baseline_median_us() == 18);
  CHECK(b.entries(1).job_id() == bob);
  CHECK(b.entries(1).speedup() == 1.45);
  CHECK(b.entries(1).confirmation().shapes_size() == 0);
  CHECK(a.ranking_results() == 2);  // shape runs are no results of their own
  // The suite counts the same figure.
  v1::SuiteQuery sq;
  sq.mutable_filter()->set_world_size(2);
  sq.add_problem_ids(1);
  auto suite = QuerySuite(f.store.get(), f.catalog, sq);
  REQUIRE(suite.ok());
  REQUIRE(suite->models_size() >= 1);
  CHECK(suite->models(0).best(0).speedup() == Approx(geomean));
  auto sub = GetSubmission(f.store.get(), alice.original, false);
  REQUIRE(sub.ok());
  CHECK(sub->ranks());
  CHECK(sub->confirmation().shapes_size() == 3);
  CHECK(sub->confirmation().speedup() == Approx(geomean));
  sub = GetSubmission(f.store.get(), alice.shapes[1], false);
  REQUIRE(sub.ok());
  CHECK(!sub->ranks());
}

TEST_CASE("a queued shape run keeps its result pending and a failed one names its shape",
          "[leaderboard][shapes]") {
  Fixture f;
  Shaped waiting = WithShapes(f, {.speedup = 2.0, .user = "alice"}, {.speedup = 1.9},
                              {{.speedup = 1.5, .m = 512}, {.stage = v1::QUEUED, .m = 768}});
  Shaped wrong =
      WithShapes(f, {.speedup = 3.0, .user = "bob"}, {.speedup = 2.9},
                 {{.status = v1::MISMATCH, .m = 2048, .n = 512}, {.speedup = 2.0, .m = 640}});
  Shaped lost = WithShapes(f, {.speedup = 2.5, .user = "carol"}, {.speedup = 2.4},
                           {{.speedup = 2.0, .m = 512}, {.status = v1::WORKER_LOST, .n = 768}});
  // Failed and still running: failed (it can never be confirmed).
  Shaped both = WithShapes(f, {.speedup = 2.2, .user = "dave"}, {.stage = v1::QUEUED},
                           {{.status = v1::TIMEOUT, .m = 896}, {.speedup = 2.0, .m = 512}});
  v1::LeaderboardAnswer a = f.Query({});
  REQUIRE(a.boards_size() == 1);
  const v1::Board& b = a.boards(0);
  CHECK(b.entries_size() == 0);
  REQUIRE(b.pending_size() == 1);
  CHECK(b.pending(0).job_id() == waiting.original);
  CHECK(b.pending(0).speedup() == 2.0);  // the submitted run's, while pending
  CHECK(b.pending(0).confirmation().state() == v1::CONFIRMATION_PENDING);
  CHECK(a.pending_results() == 1);
  auto sub = GetSubmission(f.store.get(), waiting.original, false);
  REQUIRE(sub.ok());
  CHECK(!sub->ranks());
  CHECK(sub->not_ranked_reason() ==
        "awaiting its shape run at m=768, n=1024 (job " + waiting.shapes[1] + ", queued)");
  REQUIRE(sub->confirmation().shapes_size() == 3);
  CHECK(sub->confirmation().shapes(2).stage() == v1::QUEUED);

  sub = GetSubmission(f.store.get(), wrong.original, false);
  REQUIRE(sub.ok());
  CHECK(!sub->ranks());
  CHECK(sub->confirmation().state() == v1::CONFIRMATION_FAILED);
  CHECK(sub->confirmation().reason() ==
        "its shape run at m=2048, n=512 (job " + wrong.shapes[0] + ") ended MISMATCH");
  // A ranked run that failed: the source is disqualified, and the reason says which run.
  CHECK(sub->not_ranked_reason().find("failed a ranked") != std::string::npos);
  CHECK(sub->not_ranked_reason().find("at m=2048, n=512") != std::string::npos);
  CHECK(sub->confirmation().shapes(1).status() == v1::MISMATCH);

  sub = GetSubmission(f.store.get(), lost.original, false);
  REQUIRE(sub.ok());
  CHECK(sub->not_ranked_reason() ==
        "its shape run at m=1024, n=768 (job " + lost.shapes[1] + ") ended WORKER_LOST");
  sub = GetSubmission(f.store.get(), both.original, false);
  REQUIRE(sub.ok());
  CHECK(sub->confirmation().state() == v1::CONFIRMATION_FAILED);
  CHECK(sub->confirmation().reason().find("at m=896, n=1024") != std::string::npos);
  CHECK(a.unconfirmed_results() == 1);   // carol's (a service failure disqualifies nothing)
  CHECK(a.disqualified_results() == 2);  // bob's MISMATCH and dave's TIMEOUT, ranked runs
}

}  // namespace
}  // namespace pkb
