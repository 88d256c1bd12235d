// End-to-end, the boards: the leaderboard over gRPC, confirmation runs and shape runs
// (cluster.h).
#include "tests/service/cluster.h"

namespace pkb {
namespace service_test {
namespace {

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

}  // namespace
}  // namespace service_test
}  // namespace pkb
