#include "common/leaderboard_export.h"

#include <catch2/catch.hpp>
#include <tuple>

namespace pkb {
namespace {

TEST_CASE("CSV fields are quoted only when they must be", "[export]") {
  CHECK(CsvField("plain") == "plain");
  CHECK(CsvField("a,b") == "\"a,b\"");
  CHECK(CsvField("say \"hi\"") == "\"say \"\"hi\"\"\"");
  CHECK(CsvField("two\nlines") == "\"two\nlines\"");
  CHECK(IsoTime(0).empty());
  CHECK(IsoTime(1764747600123456) == "2025-12-03T07:40:00.123456Z");
}

TEST_CASE("a leaderboard, a suite and a run export to CSV and JSON", "[export]") {
  v1::LeaderboardAnswer a;
  v1::Board* b = a.add_boards();
  v1::LeaderboardEntry* e = b->add_entries();
  e->set_problem_id(1);
  e->set_problem_slug("1_allreduce");
  e->set_world_size(8);
  e->set_rank(1);
  e->set_submitter("alice");
  e->set_model("m, with comma");
  e->set_speedup(1.25);
  e->add_tags("exp1");
  e->add_tags("fp8");
  e->set_ranked(true);
  e->mutable_confirmation()->set_state(v1::CONFIRMED);
  e->mutable_confirmation()->set_first_speedup(1.5);
  e->mutable_confirmation()->set_confirmation_speedup(1.25);
  e->mutable_confirmation()->set_job_id("c1");
  for (auto [m, n, speedup] : {std::tuple<int, int, double>{1024, 1024, 1.25}, {512, 2048, 1.5}}) {
    v1::ShapeFigure* f = e->mutable_confirmation()->add_shapes();
    f->set_m(m);
    f->set_n(n);
    f->set_stage(v1::DONE);
    f->set_status(v1::OK);
    f->set_speedup(speedup);
  }
  v1::ShapeFigure* running = e->mutable_confirmation()->add_shapes();
  running->set_m(768);
  running->set_stage(v1::QUEUED);
  v1::LeaderboardEntry* p = b->add_pending();
  p->set_problem_id(1);
  p->set_submitter("bob");
  p->set_speedup(3);
  p->mutable_confirmation()->set_state(v1::CONFIRMATION_PENDING);
  p->mutable_confirmation()->set_first_speedup(3);
  p->mutable_confirmation()->set_job_id("c2");
  std::string csv = LeaderboardCsv(a);
  CHECK(csv.rfind("problem_id,problem_slug,world_size,", 0) == 0);
  CHECK(csv.find(",finished_utc,confirmation,first_speedup,confirmation_speedup,"
                 "confirmation_job_id,shapes\n") != std::string::npos);
  CHECK(csv.find("\n1,1_allreduce,8,,,1,alice,\"m, with comma\",,1.25,0,0,,true,0,exp1;fp8,,,"
                 "CONFIRMED,1.5,1.25,c1,1024x1024=1.25;512x2048=1.5;768x0=PENDING\n") !=
        std::string::npos);
  CHECK(csv.find("\n1,,0,,,0,bob,,,3,0,0,,false,0,,,,CONFIRMATION_PENDING,3,0,c2,\n") !=
        std::string::npos);
  CHECK(ToJson(a).find("\"speedup\":1.25") != std::string::npos);

  v1::SuiteAnswer s;
  v1::ModelScore* m = s.add_models();
  m->set_model("m1");
  m->set_tasks(3);
  m->set_tasks_correct(2);
  m->set_geomean_speedup(1.5);
  for (double p : {0.0, 1.0, 1.5, 2.0}) {
    v1::FastP* f = m->add_fast_p();
    f->set_p(p);
    f->set_fast_p(p < 1.5 ? 2.0 / 3 : 1.0 / 3);
  }
  std::string suite = SuiteCsv(s);
  CHECK(suite.rfind("model,tasks,tasks_correct,geomean_speedup,fast_0,fast_1,fast_1.5,fast_2\n",
                    0) == 0);
  CHECK(suite.find("m1,3,2,1.5,0.6666666666666666,0.6666666666666666,0.3333333333333333,") !=
        std::string::npos);

  v1::Submission sub;
  sub.mutable_job()->set_job_id("j1");
  v1::EvalEvent* q = sub.add_events();
  q->set_sequence(1);
  q->set_stage(v1::QUEUED);
  q->set_message("queued (0 ahead)");
  v1::EvalEvent* d = sub.add_events();
  d->set_sequence(2);
  d->set_stage(v1::DONE);
  d->mutable_result()->set_status(v1::OK);
  d->mutable_result()->set_speedup(2);
  std::string run = SubmissionCsv(sub);
  CHECK(run.find("j1,1,,QUEUED,0,,,queued (0 ahead),,,,\n") != std::string::npos);
  CHECK(run.find("j1,2,,DONE,0,,,,OK,2,0,0\n") != std::string::npos);
}

}  // namespace
}  // namespace pkb
