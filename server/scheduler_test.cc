// Scheduler logic with a fake clock, a real SQLite store in a temp dir, and recording test
// doubles for worker connections and watchers (no gRPC): server/scheduler_fixture.h.
#include "server/scheduler.h"

#include <catch2/catch.hpp>
#include <map>
#include <set>

#include "server/scheduler_fixture.h"

namespace pkb {
namespace {

using testing::AddCompiler;
using testing::Fixture;
using testing::kCatalog;
using testing::RecordingConnection;
using testing::RecordingSink;
using testing::Tasks;

TEST_CASE("submit validates against the catalog with precise codes", "[scheduler]") {
  Fixture f;
  auto r = Fixture::Request("x");
  r.set_problem_id(99);
  CHECK(f.scheduler->Submit(r).status().code() == absl::StatusCode::kNotFound);
  auto bad_w = f.scheduler->Submit(Fixture::Request("x", 3));
  CHECK(bad_w.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(bad_w.status().message()).find("m must divide") != std::string::npos);
  CHECK(f.scheduler->Submit(Fixture::Request("x", 4)).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(f.scheduler->Submit(Fixture::Request("", 2)).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("a functional job may have more ranks than its worker has GPUs", "[scheduler]") {
  Fixture f;
  auto small = f.AddWorker(1, "one-gpu", 1, "h200", 8);
  auto plain = f.AddWorker(2, "one-gpu-plain", 1, "h200", 0);
  auto plain_w8 = f.scheduler->Submit(Fixture::Request("k", 8));
  REQUIRE(plain_w8.ok());
  CHECK(small->Leases().empty());  // W = 8 needs 8 GPUs unless functional
  CHECK(plain->Leases().empty());
  auto r = Fixture::Request("k", 8);
  r.set_functional(true);
  auto functional = f.scheduler->Submit(r);
  REQUIRE(functional.ok());
  CHECK(functional->job_id != plain_w8->job_id);  // another job key: not joined
  REQUIRE(small->Leases().size() == 1);
  CHECK(small->Leases()[0].job_id() == functional->job_id);
  CHECK(small->Leases()[0].spec().functional());
  CHECK(plain->Leases().empty());  // its node takes no functional W beyond its GPUs
  // Correctness only: never with a ranked run's secret seed.
  r.set_ranked(true);
  auto both = f.scheduler->Submit(r);
  CHECK(both.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(both.status().message()).find("functional and ranked") != std::string::npos);
}

TEST_CASE("a functional job goes to the smallest node that takes it", "[scheduler]") {
  Fixture f;
  auto big = f.AddWorker(1, "eight-gpus", 8, "h200", 8);
  auto small = f.AddWorker(2, "one-gpu", 1, "h200", 8);
  auto r = Fixture::Request("k", 2);
  r.set_functional(true);
  REQUIRE(f.scheduler->Submit(r).ok());
  CHECK(small->Leases().size() == 1);
  CHECK(big->Leases().empty());
  // A plain W = 2 job goes to the node with the GPUs.
  REQUIRE(f.scheduler->Submit(Fixture::Request("k2", 2)).ok());
  CHECK(big->Leases().size() == 1);
}

TEST_CASE("a job is leased, runs and finishes, watchers see every event once", "[scheduler]") {
  Fixture f;
  auto out = f.scheduler->Submit(Fixture::Request("kernel"));
  REQUIRE(out.ok());
  auto sink = std::make_shared<RecordingSink>();
  REQUIRE(f.scheduler->Watch(out->job_id, 0, sink).ok());
  auto w = f.AddWorker(1, "w1");
  REQUIRE(w->Leases().size() == 1);
  v1::Lease lease = w->Leases()[0];
  CHECK(lease.job_id() == out->job_id);
  CHECK(lease.attempt() == 1);
  CHECK(lease.source() == "kernel");
  CHECK(lease.spec().m() == 64);  // defaults filled in
  v1::JobEvent je;
  je.set_job_id(lease.job_id());
  je.set_attempt(1);
  je.mutable_event()->set_stage(v1::COMPILING);
  REQUIRE(f.scheduler->OnJobEvent(1, je).ok());
  f.scheduler->Flush();
  f.SendDone(1, lease, v1::MISMATCH);
  auto job = f.scheduler->Get(out->job_id);
  REQUIRE(job.ok());
  CHECK(job->stage() == v1::DONE);
  CHECK(job->result().status() == v1::MISMATCH);
  CHECK(job->result().job_key() == job->job_key());
  REQUIRE(sink->events.size() == 4);  // QUEUED, leased, COMPILING, DONE
  for (size_t i = 0; i < sink->events.size(); ++i)
    CHECK(sink->events[i].sequence() == int64_t(i + 1));
  CHECK(sink->events.back().stage() == v1::DONE);
  // A late watcher gets the whole history from the store.
  auto late = std::make_shared<RecordingSink>();
  REQUIRE(f.scheduler->Watch(out->job_id, 2, late).ok());
  CHECK(late->events.size() == 2);
  CHECK(f.scheduler->Watch("nope", 0, late).code() == absl::StatusCode::kNotFound);
}

TEST_CASE("identical jobs in flight are joined, finished ones answer from the cache",
          "[scheduler]") {
  Fixture f;
  auto a = f.scheduler->Submit(Fixture::Request("same"));
  auto b = f.scheduler->Submit(Fixture::Request("same"));
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(b->joined);
  CHECK(a->job_id == b->job_id);
  auto other = f.scheduler->Submit(Fixture::Request("same", 8));  // another world size: another key
  CHECK(other->job_id != a->job_id);
  auto w = f.AddWorker(1, "w1");
  f.SendDone(1, w->Leases()[0], v1::OK);
  auto c = f.scheduler->Submit(Fixture::Request("same"));
  REQUIRE(c.ok());
  CHECK(c->cached);
  auto job = f.scheduler->Get(c->job_id);
  CHECK(job->result().cached());
  CHECK(job->result().status() == v1::OK);
  CHECK(job->cached_from_job_id() == a->job_id);
  auto opt_out = Fixture::Request("same");
  opt_out.set_no_cache(true);
  auto d = f.scheduler->Submit(opt_out);
  CHECK(!d->cached);
  CHECK(f.scheduler->Get(d->job_id)->stage() == v1::QUEUED);
}

TEST_CASE("worker failures are never cached", "[scheduler]") {
  Fixture f;
  auto a = f.scheduler->Submit(Fixture::Request("k"));
  auto w = f.AddWorker(1, "w1");
  f.SendDone(1, w->Leases()[0], v1::INTERNAL);
  auto b = f.scheduler->Submit(Fixture::Request("k"));
  CHECK(!b->cached);
  CHECK(b->job_id != a->job_id);
}

TEST_CASE("heartbeat loss expires the lease, the job is re-leased to another worker",
          "[scheduler]") {
  Fixture f;
  auto out = f.scheduler->Submit(Fixture::Request("k"));
  auto w1 = f.AddWorker(1, "w1");
  REQUIRE(w1->Leases().size() == 1);
  auto w2 = f.AddWorker(2, "w2");
  CHECK(w2->Leases().empty());
  f.clock.Advance(absl::Seconds(6));
  v1::Heartbeat hb;
  hb.set_healthy(true);
  REQUIRE(f.scheduler->OnHeartbeat(2, hb).ok());
  f.scheduler->Flush();
  f.scheduler->Tick();
  CHECK(w2->Leases().empty());  // w1 still within its deadline
  f.clock.Advance(absl::Seconds(5));
  f.scheduler->Tick();  // w1 silent for 11 s > 10 s
  REQUIRE(w1->closed.has_value());
  REQUIRE(w2->Leases().size() == 1);
  CHECK(w2->Leases()[0].attempt() == 2);
  auto job = f.scheduler->Get(out->job_id);
  CHECK(job->attempts() == 2);
  CHECK(job->worker_id() == "w2");
  CHECK(job->last_loss_reason().find("heartbeat") != std::string::npos);
  // A stale event from w1's lease is ignored.
  CHECK(f.scheduler->OnJobEvent(1, v1::JobEvent()).code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("a finishing worker gets no lease until a heartbeat says it is done", "[scheduler]") {
  Fixture f;
  auto first = f.scheduler->Submit(Fixture::Request("first"));
  auto w1 = f.AddWorker(1, "w1");
  REQUIRE(w1->Leases().size() == 1);
  auto second = f.scheduler->Submit(Fixture::Request("second"));
  f.scheduler->Flush();
  // The verdict goes out while the job's engine still ends: the heartbeat before its DONE says so.
  v1::Heartbeat hb;
  hb.set_healthy(true);
  hb.set_finishing(true);
  hb.add_running_job_ids(first->job_id);
  REQUIRE(f.scheduler->OnHeartbeat(1, hb).ok());
  f.SendDone(1, w1->Leases()[0], v1::MISMATCH);  // (an OK one would queue its confirmation run)
  CHECK(f.scheduler->Get(first->job_id)->stage() == v1::DONE);
  CHECK(w1->Leases().size() == 1);  // the second job waits
  CHECK(f.scheduler->Get(second->job_id)->stage() == v1::QUEUED);
  // Done: the next heartbeat without it brings the next lease at once.
  hb.clear_running_job_ids();
  hb.set_finishing(false);
  REQUIRE(f.scheduler->OnHeartbeat(1, hb).ok());
  f.scheduler->Flush();
  REQUIRE(w1->Leases().size() == 2);
  CHECK(w1->Leases()[1].job_id() == second->job_id);
  // A worker that registers while finishing (a reconnect) waits the same way.
  auto third = f.scheduler->Submit(Fixture::Request("third"));
  f.scheduler->Flush();
  auto c = std::make_shared<RecordingConnection>();
  v1::Register reg;
  reg.set_worker_id("w2");
  reg.set_healthy(true);
  reg.set_finishing(true);
  reg.mutable_capabilities()->set_gpu_class("h200");
  reg.mutable_capabilities()->set_max_world_size(8);
  reg.mutable_capabilities()->set_gpu_count(8);
  reg.mutable_capabilities()->set_harness_version("h1");
  REQUIRE(f.scheduler->Connect(2, reg, c).ok());
  f.scheduler->Flush();
  CHECK(c->Leases().empty());
  hb.set_finishing(false);
  REQUIRE(f.scheduler->OnHeartbeat(2, hb).ok());
  f.scheduler->Flush();
  REQUIRE(c->Leases().size() == 1);
  CHECK(c->Leases()[0].job_id() == third->job_id);
}

TEST_CASE("attempts are capped: a job that keeps losing workers ends WORKER_LOST", "[scheduler]") {
  Fixture f;  // max_attempts = 2
  auto out = f.scheduler->Submit(Fixture::Request("k"));
  f.AddWorker(1, "w1");
  f.scheduler->Disconnect(1, "killed");
  f.clock.Advance(absl::Seconds(11));
  f.scheduler->Tick();
  CHECK(f.scheduler->Get(out->job_id)->stage() == v1::QUEUED);
  f.AddWorker(2, "w2");
  CHECK(f.scheduler->Get(out->job_id)->attempts() == 2);
  f.scheduler->Disconnect(2, "killed");
  f.clock.Advance(absl::Seconds(11));
  f.scheduler->Tick();
  auto job = f.scheduler->Get(out->job_id);
  CHECK(job->stage() == v1::DONE);
  CHECK(job->result().status() == v1::WORKER_LOST);
  CHECK(job->result().message().find("w2") != std::string::npos);
  auto again = f.scheduler->Submit(Fixture::Request("k"));
  CHECK(!again->cached);
}

TEST_CASE("a worker that reconnects in time resumes its job", "[scheduler]") {
  Fixture f;
  auto out = f.scheduler->Submit(Fixture::Request("k"));
  auto w = f.AddWorker(1, "w1");
  v1::Lease lease = w->Leases()[0];
  f.scheduler->Disconnect(1, "network blip");
  f.clock.Advance(absl::Seconds(3));
  auto c = std::make_shared<RecordingConnection>();
  v1::Register reg;
  reg.set_worker_id("w1");
  reg.set_healthy(true);
  reg.add_running_job_ids(out->job_id);
  reg.mutable_capabilities()->set_gpu_class("h200");
  reg.mutable_capabilities()->set_max_world_size(8);
  reg.mutable_capabilities()->set_harness_version("h1");
  REQUIRE(f.scheduler->Connect(5, reg, c).ok());
  f.scheduler->Flush();
  CHECK(c->sent.at(0).register_ack().cancel_job_ids_size() == 0);
  f.clock.Advance(absl::Seconds(20));
  REQUIRE(f.scheduler->OnHeartbeat(5, v1::Heartbeat()).ok());
  f.scheduler->Flush();
  f.scheduler->Tick();
  f.SendDone(5, lease, v1::OK);
  CHECK(f.scheduler->Get(out->job_id)->result().status() == v1::OK);
  CHECK(f.scheduler->Get(out->job_id)->attempts() == 1);
}

TEST_CASE("matching: world size, gpu class, harness, drain stops new leases", "[scheduler]") {
  Fixture f;
  auto small = f.AddWorker(1, "small", /*max_w=*/1);
  auto out = f.scheduler->Submit(Fixture::Request("k", 2));
  CHECK(small->Leases().empty());
  auto sink = std::make_shared<RecordingSink>();
  REQUIRE(f.scheduler->Watch(out->job_id, 0, sink).ok());
  CHECK(sink->events.at(0).message().find("no connected worker can run it") != std::string::npos);
  auto r = Fixture::Request("k2", 2);
  r.set_gpu_class("h100");
  auto h100_job = f.scheduler->Submit(r);
  auto big = f.AddWorker(2, "big", 8, "h200");
  REQUIRE(big->Leases().size() == 1);
  CHECK(big->Leases()[0].job_id() == out->job_id);
  REQUIRE(f.scheduler->OnDrain(2, v1::Drain()).ok());
  f.SendDone(2, big->Leases()[0], v1::OK);
  CHECK(big->Leases().size() == 1);  // draining: nothing new
  CHECK(f.scheduler->Get(h100_job->job_id)->stage() == v1::QUEUED);
  auto h100 = f.AddWorker(3, "h100", 8, "h100");
  REQUIRE(h100->Leases().size() == 1);
  CHECK(h100->Leases()[0].job_id() == h100_job->job_id);
}

TEST_CASE("cancel: a queued job ends at once, a running one is cancelled on its worker",
          "[scheduler]") {
  Fixture f;
  auto a = f.scheduler->Submit(Fixture::Request("a"));
  auto b = f.scheduler->Submit(Fixture::Request("b"));
  auto c = f.scheduler->Cancel(b->job_id, "test");
  REQUIRE(c.ok());
  CHECK(c->result().status() == v1::CANCELLED);
  auto w = f.AddWorker(1, "w1");
  REQUIRE(w->Leases().size() == 1);
  CHECK(w->Leases()[0].job_id() == a->job_id);
  REQUIRE(f.scheduler->Cancel(a->job_id, "test").ok());
  CHECK(w->sent.back().cancel().job_id() == a->job_id);
  auto d = f.scheduler->Submit(Fixture::Request("d"));
  CHECK(w->Leases().size() == 1);  // busy until the worker answers the cancel
  f.SendDone(1, w->Leases()[0], v1::CANCELLED);
  REQUIRE(w->Leases().size() == 2);
  CHECK(w->Leases()[1].job_id() == d->job_id);
  CHECK(f.scheduler->Get(a->job_id)->result().status() == v1::CANCELLED);
}

TEST_CASE("a restarted scheduler recovers queued and leased jobs from the store", "[scheduler]") {
  Fixture f;
  auto queued = f.scheduler->Submit(Fixture::Request("q", 8));
  auto leased = f.scheduler->Submit(Fixture::Request("l", 1));
  auto w = f.AddWorker(1, "w1", /*max_w=*/1);
  REQUIRE(w->Leases().size() == 1);
  f.scheduler = std::make_unique<Scheduler>(f.store.get(), &f.clock, f.catalog.get(), f.options);
  REQUIRE(f.scheduler->Recover().ok());
  CHECK(f.scheduler->Stats().queued == 1);
  CHECK(f.scheduler->Stats().leased == 1);
  // Its worker does not come back: the lease is lost after one timeout, and another runs it.
  f.clock.Advance(absl::Seconds(11));
  f.scheduler->Tick();
  auto w2 = f.AddWorker(2, "w2", 8);
  REQUIRE(w2->Leases().size() == 1);
  CHECK(w2->Leases()[0].job_id() == queued->job_id);  // oldest first
  CHECK(w2->Leases()[0].source() == "q");
  f.SendDone(2, w2->Leases()[0], v1::OK);
  REQUIRE(w2->Leases().size() == 2);
  CHECK(w2->Leases()[1].job_id() == leased->job_id);
  CHECK(w2->Leases()[1].attempt() == 2);
  // Sequence numbers continue after the restart.
  auto sink = std::make_shared<RecordingSink>();
  REQUIRE(f.scheduler->Watch(leased->job_id, 0, sink).ok());
  for (size_t i = 0; i < sink->events.size(); ++i)
    CHECK(sink->events[i].sequence() == int64_t(i + 1));
}

}  // namespace
}  // namespace pkb

namespace pkb {
namespace {

TEST_CASE("ranked submissions run on the secret seed, keyed apart, refused without one",
          "[scheduler][leaderboard]") {
  {
    Fixture f;  // no secret
    auto r = Fixture::Request("k");
    r.set_ranked(true);
    CHECK(f.scheduler->Submit(r).status().code() == absl::StatusCode::kFailedPrecondition);
  }
  Fixture f;
  f.options.secret_set_offset = 777;
  f.scheduler = std::make_unique<Scheduler>(f.store.get(), &f.clock, f.catalog.get(), f.options);
  auto pub = Fixture::Request("k");
  pub.set_model("m1");
  pub.set_agent("a1");
  pub.add_tags("exp");
  auto ranked = pub;
  ranked.set_ranked(true);
  auto p = f.scheduler->Submit(pub);
  auto s = f.scheduler->Submit(ranked);
  REQUIRE(p.ok());
  REQUIRE(s.ok());
  CHECK(!s->joined);  // other inputs: not the same job
  auto w1 = f.AddWorker(1, "w1", 8, "h100");
  auto w2 = f.AddWorker(2, "w2", 8, "h200");
  REQUIRE(w1->Leases().size() == 1);
  REQUIRE(w2->Leases().size() == 1);
  CHECK(w1->Leases()[0].spec().set_offset() == 0);
  // A ranked job runs on its own offset, derived from the secret and its id.
  CHECK(w2->Leases()[0].spec().set_offset() == JobSetOffset(777, s->job_id));
  CHECK(w2->Leases()[0].spec().set_offset() != 777);
  CHECK(w2->Leases()[0].spec().set_offset() > 0);
  CHECK(JobSetOffset(777, s->job_id) != JobSetOffset(777, s->job_id + "x"));
  CHECK(JobSetOffset(777, s->job_id) != JobSetOffset(778, s->job_id));
  auto pj = *f.scheduler->Get(p->job_id);
  auto sj = *f.scheduler->Get(s->job_id);
  CHECK(pj.job_key() != sj.job_key());
  CHECK(pj.gpu_class() == "h100");  // the worker's class, for the leaderboard
  CHECK(sj.gpu_class() == "h200");
  CHECK(sj.request().ranked());
  CHECK(sj.request().model() == "m1");
  CHECK(sj.request().agent() == "a1");
  CHECK(sj.request().tags(0) == "exp");
  // Metadata is checked at Submit.
  auto bad = Fixture::Request("k2");
  bad.add_tags(std::string(65, 't'));
  CHECK(f.scheduler->Submit(bad).status().code() == absl::StatusCode::kInvalidArgument);
}

v1::SubmitRequest By(const std::string& submitter, const std::string& source, int w = 2) {
  v1::SubmitRequest r = Fixture::Request(source, w);
  r.set_submitter(submitter);
  return r;
}

TEST_CASE("an identical job of another submitter is followed, survives a restart, and gets a copy",
          "[scheduler][tenants]") {
  Fixture f;
  auto a = f.scheduler->Submit(By("alice", "k"));
  auto again = f.scheduler->Submit(By("alice", "k"));
  auto b = f.scheduler->Submit(By("bob", "k"));
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(again->joined);
  CHECK(again->job_id == a->job_id);  // one's own job: joined
  CHECK(b->follows);
  CHECK(b->job_id != a->job_id);  // another's: a job of one's own
  CHECK(f.scheduler->Stats().queued == 1);
  // A restart finds the follower behind its leader.
  f.scheduler = std::make_unique<Scheduler>(f.store.get(), &f.clock, f.catalog.get(), f.options);
  REQUIRE(f.scheduler->Recover().ok());
  CHECK(f.scheduler->Stats().queued == 1);
  auto sink = std::make_shared<RecordingSink>();
  REQUIRE(f.scheduler->Watch(b->job_id, 0, sink).ok());
  auto w = f.AddWorker(1, "w1");
  REQUIRE(w->Leases().size() == 1);
  CHECK(w->Leases()[0].job_id() == a->job_id);
  f.SendDone(1, w->Leases()[0], v1::OK);
  v1::Job bob = *f.scheduler->Get(b->job_id);
  CHECK(bob.stage() == v1::DONE);
  CHECK(bob.result().status() == v1::OK);
  CHECK(bob.result().cached());
  CHECK(bob.cached_from_job_id() == a->job_id);
  CHECK(bob.reported_by_worker() == "w1");
  CHECK(f.scheduler->Get(a->job_id)->reported_by_worker() == "w1");
  REQUIRE(!sink->events.empty());
  CHECK(sink->events.back().stage() == v1::DONE);
  for (size_t i = 0; i < sink->events.size(); ++i)
    CHECK(sink->events[i].sequence() == int64_t(i + 1));
  CHECK(std::count_if(sink->events.begin(), sink->events.end(),
                      [](const v1::EvalEvent& e) { return e.stage() == v1::DONE; }) == 1);
}

TEST_CASE("a cancelled leader hands the run to its first follower", "[scheduler][tenants]") {
  Fixture f;
  auto a = f.scheduler->Submit(By("alice", "k"));
  auto b = f.scheduler->Submit(By("bob", "k"));
  auto c = f.scheduler->Submit(By("carol", "k"));
  REQUIRE(f.scheduler->Cancel(a->job_id, "by a client request").ok());
  CHECK(f.scheduler->Get(a->job_id)->result().status() == v1::CANCELLED);
  CHECK(f.scheduler->Get(b->job_id)->stage() == v1::QUEUED);
  CHECK(f.scheduler->Get(b->job_id)->cached_from_job_id().empty());
  CHECK(f.scheduler->Get(c->job_id)->cached_from_job_id() == b->job_id);
  auto w = f.AddWorker(1, "w1");
  REQUIRE(w->Leases().size() == 1);
  CHECK(w->Leases()[0].job_id() == b->job_id);
  f.SendDone(1, w->Leases()[0], v1::MISMATCH);
  CHECK(f.scheduler->Get(b->job_id)->result().status() == v1::MISMATCH);
  CHECK(f.scheduler->Get(c->job_id)->result().status() == v1::MISMATCH);
  // A follower that cancels leaves its leader running.
  auto d = f.scheduler->Submit(By("dave", "m"));
  auto e = f.scheduler->Submit(By("erin", "m"));
  REQUIRE(f.scheduler->Cancel(e->job_id, "by a client request").ok());
  REQUIRE(w->Leases().size() == 2);
  f.SendDone(1, w->Leases()[1], v1::OK);
  CHECK(f.scheduler->Get(d->job_id)->result().status() == v1::OK);
  CHECK(f.scheduler->Get(e->job_id)->result().status() == v1::CANCELLED);
}

TEST_CASE("a job nobody leases ends CANCELLED at the queue deadline, followers with it",
          "[scheduler][limits]") {
  Fixture f;
  f.options.queue_deadline = absl::Minutes(5);
  f.options.gpu_classes = {"h200"};
  f.scheduler = std::make_unique<Scheduler>(f.store.get(), &f.clock, f.catalog.get(), f.options);
  auto bad = Fixture::Request("x");
  bad.set_gpu_class("a100");
  absl::Status st = f.scheduler->Submit(bad).status();
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(st.message()).find("gpu_class: 'a100'") == 0);
  auto a = f.scheduler->Submit(By("alice", "x", 8));
  auto b = f.scheduler->Submit(By("bob", "x", 8));
  auto w = f.AddWorker(1, "w1", /*max_w=*/2);  // cannot take W = 8
  f.clock.Advance(absl::Minutes(4));
  f.scheduler->Tick();
  CHECK(f.scheduler->Get(a->job_id)->stage() == v1::QUEUED);
  f.clock.Advance(absl::Minutes(2));
  f.scheduler->Tick();
  v1::Job job = *f.scheduler->Get(a->job_id);
  CHECK(job.result().status() == v1::CANCELLED);
  CHECK(job.result().message().find("queue deadline") != std::string::npos);
  CHECK(f.scheduler->Get(b->job_id)->result().status() == v1::CANCELLED);
  CHECK(f.scheduler->Stats().queued == 0);
}

TEST_CASE("voiding a worker's results takes them off the cache", "[scheduler][workers]") {
  Fixture f;
  auto a = f.scheduler->Submit(Fixture::Request("k"));
  auto w = f.AddWorker(1, "w1");
  f.SendDone(1, w->Leases()[0], v1::OK);
  auto copy = f.scheduler->Submit(Fixture::Request("k"));
  CHECK(copy->cached);
  CHECK(f.scheduler->VoidWorker("", "x").status().code() == absl::StatusCode::kInvalidArgument);
  auto voided = f.scheduler->VoidWorker("w1", "leaked token");
  REQUIRE(voided.ok());
  CHECK(voided->size() == 2);
  v1::Job job = *f.scheduler->Get(a->job_id);
  CHECK(job.result().status() == v1::VOIDED);
  CHECK(job.result().voided_status() == v1::OK);
  auto fresh = f.scheduler->Submit(Fixture::Request("k"));
  CHECK_FALSE(fresh->cached);
  CHECK(f.scheduler->VoidWorker("w1", "again")->empty());
}

TEST_CASE("language: checked, keyed apart, cpp goes to cpu workers and reaches the lease",
          "[scheduler]") {
  Fixture f;
  auto bad = Fixture::Request("k");
  bad.set_language("fortran");
  absl::Status refused = f.scheduler->Submit(bad).status();
  CHECK(refused.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(refused.message()).find("language 'fortran'") != std::string::npos);
  auto on_gpu = Fixture::Request("k");
  on_gpu.set_language("cpp");
  on_gpu.set_gpu_class("h200");
  refused = f.scheduler->Submit(on_gpu).status();
  CHECK(refused.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(refused.message()).find("gpu_class") != std::string::npos);

  auto cuda = f.scheduler->Submit(Fixture::Request("same source"));
  auto cpp_request = Fixture::Request("same source");
  cpp_request.set_language("cpp");
  auto cpp = f.scheduler->Submit(cpp_request);
  REQUIRE(cuda.ok());
  REQUIRE(cpp.ok());
  CHECK(!cpp->joined);  // the same text as another language is another job
  auto cuda_job = *f.scheduler->Get(cuda->job_id);
  auto cpp_job = *f.scheduler->Get(cpp->job_id);
  CHECK(cuda_job.request().language() == "cuda");  // the default, filled in
  CHECK(cpp_job.request().gpu_class() == "cpu");   // none named: the GPU-less workers'
  CHECK(cuda_job.job_key() != cpp_job.job_key());
  // An explicit "cuda" is the default: the same job.
  auto explicit_cuda = Fixture::Request("same source");
  explicit_cuda.set_language("cuda");
  auto joined = f.scheduler->Submit(explicit_cuda);
  REQUIRE(joined.ok());
  CHECK(joined->job_id == cuda->job_id);

  auto gpu = f.AddWorker(1, "gpu", 8, "h200");
  auto cpu = f.AddWorker(2, "cpu", 8, "cpu");
  REQUIRE(cpu->Leases().size() == 1);
  CHECK(cpu->Leases()[0].job_id() == cpp->job_id);
  CHECK(cpu->Leases()[0].spec().language() == "cpp");
  REQUIRE(gpu->Leases().size() == 1);
  CHECK(gpu->Leases()[0].spec().language() == "cuda");
}

}  // namespace
}  // namespace pkb

namespace pkb {
namespace {

// The confirmation jobs in the store, oldest first.
std::vector<v1::Job> Confirmations(JobStore* store) {
  JobQuery q;
  q.confirmations = true;
  q.by_created = true;
  auto jobs = store->ListJobs(q);
  REQUIRE(jobs.ok());
  return *jobs;
}

void SendOk(Fixture& f, uint64_t conn, const v1::Lease& lease, double speedup) {
  v1::JobEvent je;
  je.set_job_id(lease.job_id());
  je.set_attempt(lease.attempt());
  je.mutable_event()->set_stage(v1::DONE);
  v1::EvalResult* r = je.mutable_event()->mutable_result();
  r->set_status(v1::OK);
  r->set_speedup(speedup);
  r->set_confirmation_job_id("forged");  // the coordinator's field, never the worker's
  REQUIRE(f.scheduler->OnJobEvent(conn, je).ok());
  f.scheduler->Flush();
}

TEST_CASE("an OK result is timed again on another worker of its class and linked both ways",
          "[scheduler][confirm]") {
  Fixture f;
  f.options.secret_set_offset = 777;
  f.scheduler = std::make_unique<Scheduler>(f.store.get(), &f.clock, f.catalog.get(), f.options);
  auto w1 = f.AddWorker(1, "w1", 8, "h200");
  v1::SubmitRequest req = By("alice", "k");
  req.set_ranked(true);
  req.set_model("m1");
  req.add_tags("exp");
  auto out = f.scheduler->Submit(req);
  REQUIRE(out.ok());
  REQUIRE(w1->Leases().size() == 1);
  auto w3 = f.AddWorker(3, "w3", 8, "h100");  // idle, another class
  auto w2 = f.AddWorker(2, "w2", 8, "h200");  // idle, the same class
  auto sink = std::make_shared<RecordingSink>();
  REQUIRE(f.scheduler->Watch(out->job_id, 0, sink).ok());
  SendOk(f, 1, w1->Leases()[0], 2.0);

  v1::Job original = *f.scheduler->Get(out->job_id);
  REQUIRE(!original.confirmation_job_id().empty());
  CHECK(original.result().confirmation_job_id() == original.confirmation_job_id());
  CHECK(original.result().confirms_job_id().empty());
  REQUIRE(!sink->events.empty());
  CHECK(sink->events.back().stage() == v1::DONE);
  CHECK(sink->events.back().result().confirmation_job_id() == original.confirmation_job_id());
  CHECK(sink->events.back().message().find("confirmation run " + original.confirmation_job_id()) !=
        std::string::npos);
  const std::string cid = original.confirmation_job_id();
  v1::Job conf = *f.scheduler->Get(cid);
  CHECK(conf.confirms_job_id() == out->job_id);
  CHECK(conf.job_key() == original.job_key());
  CHECK(conf.request().submitter() == "alice");
  CHECK(conf.request().model() == "m1");
  CHECK(conf.request().tags(0) == "exp");
  CHECK(conf.request().ranked());
  CHECK(conf.request().no_cache());
  CHECK(conf.request().gpu_class() == "h200");  // the class its original ran on
  // Not w1 (which ran the original, and is idle), not w3 (another class): w2.
  CHECK(w1->Leases().size() == 1);
  CHECK(w3->Leases().empty());
  REQUIRE(w2->Leases().size() == 1);
  const v1::Lease lease = w2->Leases()[0];
  CHECK(lease.job_id() == cid);
  CHECK(lease.source() == "k");
  CHECK(lease.spec().set_offset() == JobSetOffset(777, cid));  // fresh secret inputs
  CHECK(lease.spec().set_offset() != w1->Leases()[0].spec().set_offset());
  // A confirmation gets none of its own.
  SendOk(f, 2, lease, 1.7);
  conf = *f.scheduler->Get(cid);
  CHECK(conf.stage() == v1::DONE);
  CHECK(conf.confirmation_job_id().empty());
  CHECK(conf.result().confirms_job_id() == out->job_id);
  CHECK(conf.result().confirmation_job_id().empty());
  CHECK(Confirmations(f.store.get()).size() == 1);
  CHECK(f.scheduler->Stats().queued == 0);
  // The cache answers from the original, never from its confirmation; the copy has none.
  auto again = f.scheduler->Submit(req);
  REQUIRE(again.ok());
  CHECK(again->cached);
  v1::Job copy = *f.scheduler->Get(again->job_id);
  CHECK(copy.cached_from_job_id() == out->job_id);
  CHECK(copy.result().confirmation_job_id().empty());
  CHECK(copy.confirmation_job_id().empty());
  CHECK(Confirmations(f.store.get()).size() == 1);
}

TEST_CASE("no confirmation for failures or copies and a lone worker confirms its own result",
          "[scheduler][confirm]") {
  Fixture f;
  auto w = f.AddWorker(1, "w1");
  auto bad = f.scheduler->Submit(By("alice", "bad"));
  REQUIRE(w->Leases().size() == 1);
  f.SendDone(1, w->Leases()[0], v1::MISMATCH);
  CHECK(f.scheduler->Get(bad->job_id)->confirmation_job_id().empty());
  CHECK(Confirmations(f.store.get()).empty());
  // bob's identical job follows alice's: one confirmation, alice's.
  auto a = f.scheduler->Submit(By("alice", "k"));
  auto b = f.scheduler->Submit(By("bob", "k"));
  REQUIRE(b->follows);
  REQUIRE(w->Leases().size() == 2);
  SendOk(f, 1, w->Leases()[1], 1.5);
  CHECK(f.scheduler->Get(b->job_id)->result().confirmation_job_id().empty());
  std::vector<v1::Job> confs = Confirmations(f.store.get());
  REQUIRE(confs.size() == 1);
  CHECK(confs[0].confirms_job_id() == a->job_id);
  // No other worker of its class is connected: the same worker times it again.
  REQUIRE(w->Leases().size() == 3);
  CHECK(w->Leases()[2].job_id() == confs[0].job_id());
  // A submission of the same source while it runs is not joined to it (no_cache, not in the
  // dedup map): it is answered from the original.
  auto c = f.scheduler->Submit(By("alice", "k"));
  CHECK(c->cached);
  CHECK(f.scheduler->Get(c->job_id)->cached_from_job_id() == a->job_id);
}

TEST_CASE("a confirmation waits for another worker of its class while one is connected",
          "[scheduler][confirm]") {
  Fixture f;
  auto w1 = f.AddWorker(1, "w1");
  auto w2 = f.AddWorker(2, "w2");
  auto busy = f.scheduler->Submit(By("bob", "FAKE_HANG"));
  auto a = f.scheduler->Submit(By("alice", "k"));
  REQUIRE(w1->Leases().size() == 1);
  REQUIRE(w2->Leases().size() == 1);
  const uint64_t ran_on = w1->Leases()[0].job_id() == a->job_id ? 1 : 2;
  auto& ran = ran_on == 1 ? w1 : w2;
  SendOk(f, ran_on, ran->Leases()[0], 1.5);
  // The worker that ran it is idle, the other busy: the confirmation waits.
  CHECK(ran->Leases().size() == 1);
  CHECK(f.scheduler->Stats().queued == 1);
  // The other one goes away: the same worker may now time it.
  f.scheduler->Disconnect(3 - ran_on, "test");
  f.scheduler->Flush();
  REQUIRE(ran->Leases().size() == 2);
  CHECK(ran->Leases()[1].job_id() == f.scheduler->Get(a->job_id)->confirmation_job_id());
  CHECK(f.scheduler->Get(busy->job_id)->stage() == v1::QUEUED);  // leased, never finished
}

TEST_CASE("confirmations survive a restart and one without its original's DONE is cancelled",
          "[scheduler][confirm]") {
  Fixture f;
  auto w = f.AddWorker(1, "w1");
  auto a = f.scheduler->Submit(By("alice", "k"));
  SendOk(f, 1, w->Leases()[0], 1.5);
  const std::string cid = f.scheduler->Get(a->job_id)->confirmation_job_id();
  REQUIRE(w->Leases().size() == 2);  // leased, running, when the coordinator stops
  // What a coordinator that stopped between the two writes leaves: a confirmation whose original
  // has not finished.
  auto pending = f.scheduler->Submit(By("carol", "p", 8));
  REQUIRE(pending.ok());
  v1::Job orphan = *f.scheduler->Get(cid);
  orphan.set_job_id("j-orphan");
  orphan.set_confirms_job_id(pending->job_id);
  orphan.set_stage(v1::QUEUED);
  orphan.set_worker_id("");
  orphan.mutable_request()->set_source("p");
  REQUIRE(f.store->CreateJob(orphan, nullptr).ok());

  f.scheduler = std::make_unique<Scheduler>(f.store.get(), &f.clock, f.catalog.get(), f.options);
  REQUIRE(f.scheduler->Recover().ok());
  f.scheduler->Flush();
  v1::Job o = *f.scheduler->Get("j-orphan");
  CHECK(o.stage() == v1::DONE);
  CHECK(o.result().status() == v1::CANCELLED);
  CHECK(o.result().message().find("had not finished") != std::string::npos);
  // The leased confirmation resumes on its worker, which reconnects still running it.
  auto c = std::make_shared<RecordingConnection>();
  v1::Register reg;
  reg.set_worker_id("w1");
  reg.set_healthy(true);
  reg.mutable_capabilities()->set_gpu_class("h200");
  reg.mutable_capabilities()->set_max_world_size(8);
  reg.mutable_capabilities()->set_harness_version("h1");
  reg.add_running_job_ids(cid);
  REQUIRE(f.scheduler->Connect(5, reg, c).ok());
  f.scheduler->Flush();
  v1::Lease resumed;
  resumed.set_job_id(cid);
  resumed.set_attempt(1);
  SendOk(f, 5, resumed, 1.4);
  v1::Job conf = *f.scheduler->Get(cid);
  CHECK(conf.stage() == v1::DONE);
  CHECK(conf.result().status() == v1::OK);
  CHECK(conf.result().confirms_job_id() == a->job_id);
  // carol's job runs now, and its OK verdict queues a confirmation of its own.
  REQUIRE(!c->Leases().empty());
  CHECK(c->Leases().back().job_id() == pending->job_id);
  SendOk(f, 5, c->Leases().back(), 1.2);
  v1::Job carol = *f.scheduler->Get(pending->job_id);
  CHECK(!carol.confirmation_job_id().empty());
  CHECK(carol.confirmation_job_id() != "j-orphan");
  CHECK(Confirmations(f.store.get()).size() == 3);
}

TEST_CASE("practice runs: public seeds only and keyed apart and never confirmed",
          "[scheduler][practice]") {
  Fixture f;
  f.options.secret_set_offset = 777;
  f.scheduler = std::make_unique<Scheduler>(f.store.get(), &f.clock, f.catalog.get(), f.options);
  v1::SubmitRequest practice = By("alice", "k");
  practice.set_practice(true);
  practice.set_ranked(true);
  auto refused = f.scheduler->Submit(practice);
  CHECK(refused.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(refused.status().message().find("practice") == 0);
  practice.set_ranked(false);
  auto p = f.scheduler->Submit(practice);
  auto real = f.scheduler->Submit(By("alice", "k"));  // the same source, not practice
  REQUIRE(p.ok());
  REQUIRE(real.ok());
  CHECK(!real->joined);  // not joined to the practice run
  CHECK(f.scheduler->Get(p->job_id)->job_key() != f.scheduler->Get(real->job_id)->job_key());
  auto w = f.AddWorker(1, "w1");
  REQUIRE(w->Leases().size() == 1);
  SendOk(f, 1, w->Leases()[0], 1.5);  // the practice run, OK
  CHECK(f.scheduler->Get(p->job_id)->confirmation_job_id().empty());
  CHECK(Confirmations(f.store.get()).empty());
  // A practice verdict answers practice runs only.
  auto again = f.scheduler->Submit(practice);
  CHECK(again->cached);
  CHECK(f.scheduler->Get(again->job_id)->cached_from_job_id() == p->job_id);
  REQUIRE(w->Leases().size() == 2);
  CHECK(w->Leases()[1].job_id() == real->job_id);  // the real one still runs
}

v1::EvalSpec CompileSpec(const std::string& language, const std::string& gpu_class) {
  v1::EvalSpec s;
  s.set_problem_id(1);
  s.set_world_size(8);  // any world size: a compile takes no GPU
  s.set_language(language);
  s.set_gpu_class(gpu_class);
  return s;
}

TEST_CASE("compile tasks go to a worker that compiles and are answered exactly once",
          "[scheduler][compile]") {
  Fixture f;
  std::vector<CompileAnswer> answers;
  auto record = [&](CompileAnswer a) { answers.push_back(std::move(a)); };
  // Nobody: answered at once, UNAVAILABLE, saying so.
  f.scheduler->StartCompile(CompileSpec("cuda", "any"), "src", record);
  REQUIRE(answers.size() == 1);
  CHECK(answers[0].status.code() == absl::StatusCode::kUnavailable);
  CHECK(std::string(answers[0].status.message()).find("no connected worker compiles cuda") !=
        std::string::npos);
  // A worker of before (no compile slots) is never sent one.
  auto old = AddCompiler(f, 1, "old", "h200", 0);
  f.scheduler->StartCompile(CompileSpec("cuda", "any"), "src", record);
  REQUIRE(answers.size() == 2);
  CHECK(answers[1].status.code() == absl::StatusCode::kUnavailable);
  CHECK(Tasks(*old).empty());

  auto cpu = AddCompiler(f, 2, "cpu1", "cpu", 2);
  auto gpu = AddCompiler(f, 3, "gpu1", "h200", 2);
  // cpp: the cpu worker only. CUDA: the GPU node among equally loaded ones.
  f.scheduler->StartCompile(CompileSpec("cpp", "cpu"), "host", record);
  f.scheduler->StartCompile(CompileSpec("cuda", "any"), "dev", record);
  CHECK(answers.size() == 2);
  REQUIRE(Tasks(*cpu).size() == 1);
  REQUIRE(Tasks(*gpu).size() == 1);
  CHECK(Tasks(*cpu)[0].source() == "host");
  CHECK(Tasks(*gpu)[0].source() == "dev");
  CHECK(Tasks(*gpu)[0].spec().world_size() == 8);
  CHECK(Tasks(*gpu)[0].deadline_ms() == 120000);
  // A compile holds no job slot: a job is still leased to the GPU worker.
  REQUIRE(f.scheduler->Submit(Fixture::Request("job", 1)).ok());
  CHECK(gpu->Leases().size() + cpu->Leases().size() + old->Leases().size() == 1);

  // The worker's answer reaches the caller once; a second (stale) one is dropped.
  v1::CompileTaskResult done;
  done.set_task_id(Tasks(*gpu)[0].task_id());
  done.mutable_result()->set_status(v1::COMPILED);
  REQUIRE(f.scheduler->OnCompileResult(3, done).ok());
  REQUIRE(answers.size() == 3);
  CHECK(answers[2].status.ok());
  CHECK(answers[2].result.status() == v1::COMPILED);
  CHECK(answers[2].worker_id == "gpu1");
  REQUIRE(f.scheduler->OnCompileResult(3, done).ok());
  CHECK(answers.size() == 3);

  // The cpu worker is lost: its task is answered UNAVAILABLE at once.
  f.scheduler->Disconnect(2, "test");
  REQUIRE(answers.size() == 4);
  CHECK(answers[3].status.code() == absl::StatusCode::kUnavailable);
  CHECK(std::string(answers[3].status.message()).find("cpu1 was lost") != std::string::npos);

  // Silence past the deadline: DEADLINE_EXCEEDED from Tick (heartbeats keep the worker).
  f.scheduler->StartCompile(CompileSpec("cuda", "h200"), "slow", record);
  REQUIRE(Tasks(*gpu).size() == 2);
  for (int i = 0; i < 13; ++i) {
    f.clock.Advance(absl::Seconds(10));
    v1::Heartbeat hb;
    hb.set_healthy(true);
    for (const auto& l : gpu->Leases()) hb.add_running_job_ids(l.job_id());
    REQUIRE(f.scheduler->OnHeartbeat(3, hb).ok());
    f.scheduler->Tick();
  }
  REQUIRE(answers.size() == 5);
  CHECK(answers[4].status.code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(answers[4].worker_id == "gpu1");

  // Busy: at most compile_tasks_per_slot tasks per slot in flight, then UNAVAILABLE.
  for (int i = 0; i < 2 * f.options.compile_tasks_per_slot; ++i)
    f.scheduler->StartCompile(CompileSpec("cuda", "h200"), "many", record);
  CHECK(answers.size() == 5);
  f.scheduler->StartCompile(CompileSpec("cuda", "h200"), "one more", record);
  REQUIRE(answers.size() == 6);
  CHECK(std::string(answers[5].status.message()).find("busy") != std::string::npos);
  // The coordinator's shutdown answers the rest.
  f.scheduler->AbandonCompiles("shutting down");
  CHECK(answers.size() == size_t(6 + 2 * f.options.compile_tasks_per_slot));
}

v1::ShapeRange ShapedRange() {
  v1::ShapeRange r;  // problem 2's at W = 2 in kCatalog
  r.set_m_min(32);
  r.set_m_max(128);
  r.set_m_step(8);
  r.set_n_min(64);
  r.set_n_max(64);
  r.set_n_step(1);
  return r;
}

TEST_CASE("shapes are drawn from the range apart from the job's own from the secret and the id",
          "[scheduler][shapes]") {
  const v1::ShapeRange r = ShapedRange();
  const auto a = DrawRankedShapes(777, "j1", r, 64, 64, 2);
  REQUIRE(a.size() == 2);
  CHECK(a == DrawRankedShapes(777, "j1", r, 64, 64, 2));  // the same job: the same shapes
  CHECK(a[0] != a[1]);
  for (const auto& [m, n] : a) {
    CHECK(m >= 32);
    CHECK(m <= 128);
    CHECK((m - 32) % 8 == 0);
    CHECK(n == 64);
    CHECK(m != 64);
  }
  // Other jobs and other secrets draw other shapes (13 points: some of 20 draws must differ).
  int differ = 0;
  for (int i = 0; i < 10; ++i) {
    differ += DrawRankedShapes(777, "j" + std::to_string(i + 2), r, 64, 64, 2) != a;
    differ += DrawRankedShapes(778 + i, "j1", r, 64, 64, 2) != a;
  }
  CHECK(differ >= 15);
  // Two points, the job's own one of them: one shape run. One point, or none declared: none.
  v1::ShapeRange two = r;
  two.set_m_min(64);
  two.set_m_max(72);
  CHECK(DrawRankedShapes(777, "j1", two, 64, 64, 2) ==
        std::vector<std::pair<int64_t, int64_t>>{{72, 64}});
  v1::ShapeRange one = two;
  one.set_m_max(64);
  CHECK(DrawRankedShapes(777, "j1", one, 64, 64, 2).empty());
  CHECK(DrawRankedShapes(777, "j1", v1::ShapeRange(), 64, 64, 2).empty());
}

TEST_CASE("a ranked OK result gets a confirmation and two shape runs inside its declared range",
          "[scheduler][confirm][shapes]") {
  Fixture f;
  f.options.secret_set_offset = 777;
  f.scheduler = std::make_unique<Scheduler>(f.store.get(), &f.clock, f.catalog.get(), f.options);
  auto w1 = f.AddWorker(1, "w1", 8, "h200");
  v1::SubmitRequest req = By("alice", "k");
  req.set_problem_id(2);
  req.set_ranked(true);
  req.set_model("m1");
  auto out = f.scheduler->Submit(req);
  REQUIRE(out.ok());
  REQUIRE(w1->Leases().size() == 1);
  auto sink = std::make_shared<RecordingSink>();
  REQUIRE(f.scheduler->Watch(out->job_id, 0, sink).ok());
  SendOk(f, 1, w1->Leases()[0], 2.0);

  const v1::Job original = *f.scheduler->Get(out->job_id);
  REQUIRE(!original.confirmation_job_id().empty());
  REQUIRE(original.shape_job_ids_size() == 2);
  CHECK(original.result().shape_job_ids_size() == 2);
  CHECK(original.result().shape_job_ids(0) == original.shape_job_ids(0));
  CHECK(original.result().shape_job_ids(1) == original.shape_job_ids(1));
  REQUIRE(!sink->events.empty());
  CHECK(sink->events.back().stage() == v1::DONE);
  CHECK(sink->events.back().result().shape_job_ids_size() == 2);
  const std::string said = sink->events.back().message();
  CHECK(said.find("shape runs " + original.shape_job_ids(0)) != std::string::npos);
  CHECK(said.find("geometric mean") != std::string::npos);
  // One confirmation and two shape runs, all confirming the original.
  const std::vector<v1::Job> confs = Confirmations(f.store.get());
  REQUIRE(confs.size() == 3);
  const auto drawn =
      DrawRankedShapes(777, out->job_id, ShapedRange(), 64, 64, Scheduler::kShapeRuns);
  REQUIRE(drawn.size() == 2);
  std::set<std::string> keys = {original.job_key()};
  for (int i = 0; i < 2; ++i) {
    const v1::Job s = *f.scheduler->Get(original.shape_job_ids(i));
    INFO("shape run " << i << ": m=" << s.request().spec().m() << " n=" << s.request().spec().n());
    CHECK(s.confirms_job_id() == out->job_id);
    CHECK(s.shape_run());
    CHECK(s.stage() == v1::QUEUED);
    const int64_t m = s.request().spec().m(), n = s.request().spec().n();
    CHECK(std::make_pair(m, n) == drawn[i]);
    CHECK(m >= 32);
    CHECK(m <= 128);
    CHECK((m - 32) % 8 == 0);
    CHECK(n == 64);
    CHECK(std::make_pair(m, n) != std::make_pair<int64_t, int64_t>(64, 64));
    CHECK(s.request().m() == m);  // the deprecated fields mirror the spec
    CHECK(s.request().spec().ranked());
    CHECK(s.request().no_cache());
    CHECK(s.request().submitter() == "alice");
    CHECK(s.request().model() == "m1");
    CHECK(s.request().spec().gpu_class() == "h200");
    CHECK(s.source_sha256() == original.source_sha256());
    keys.insert(s.job_key());  // another spec, another key
  }
  CHECK(keys.size() == 3);
  CHECK(original.shape_job_ids(0) != original.shape_job_ids(1));

  // The lone worker takes the confirmation (no other can); the shape runs wait.
  REQUIRE(w1->Leases().size() == 2);
  CHECK(w1->Leases()[1].job_id() == original.confirmation_job_id());
  CHECK(f.scheduler->Stats().queued == 2);
  // A restart keeps them: their original's DONE names them.
  f.scheduler = std::make_unique<Scheduler>(f.store.get(), &f.clock, f.catalog.get(), f.options);
  REQUIRE(f.scheduler->Recover().ok());
  f.scheduler->Flush();
  CHECK(f.scheduler->Stats().queued == 2);
  // Each runs with its shape on fresh secret inputs, and its DONE names its shape.
  auto w2 = f.AddWorker(2, "w2", 8, "h200");
  std::map<std::string, v1::Lease> leases;
  for (int round = 0; round < 3 && leases.size() < 2; ++round) {
    const std::vector<v1::Lease> now = w2->Leases();
    for (const v1::Lease& l : now) {
      if (leases.emplace(l.job_id(), l).second) SendOk(f, 2, l, 1.5);
    }
  }
  REQUIRE(leases.size() == 2);
  for (int i = 0; i < 2; ++i) {
    const std::string id = original.shape_job_ids(i);
    REQUIRE(leases.count(id));
    CHECK(leases[id].spec().m() == drawn[i].first);
    CHECK(leases[id].spec().set_offset() == JobSetOffset(777, id));
    const v1::Job s = *f.scheduler->Get(id);
    CHECK(s.stage() == v1::DONE);
    CHECK(s.result().shape_run());
    CHECK(s.result().confirms_job_id() == out->job_id);
    CHECK(s.confirmation_job_id().empty());  // none of its own
    CHECK(s.shape_job_ids().empty());
  }
  CHECK(Confirmations(f.store.get()).size() == 3);
  // The cache answers from the original; its copy names no runs.
  auto again = f.scheduler->Submit(req);
  REQUIRE(again.ok());
  CHECK(again->cached);
  CHECK(f.scheduler->Get(again->job_id)->result().shape_job_ids().empty());
}

TEST_CASE("no shape runs unranked or for a one-point range or without a declared range",
          "[scheduler][confirm][shapes]") {
  Fixture f;
  f.options.secret_set_offset = 777;
  f.scheduler = std::make_unique<Scheduler>(f.store.get(), &f.clock, f.catalog.get(), f.options);
  auto w = f.AddWorker(1, "w1");
  auto run_ok = [&](v1::SubmitRequest req) {
    auto out = f.scheduler->Submit(req);
    REQUIRE(out.ok());
    const v1::Lease lease = w->Leases().back();
    REQUIRE(lease.job_id() == out->job_id);
    auto sink = std::make_shared<RecordingSink>();
    REQUIRE(f.scheduler->Watch(out->job_id, 0, sink).ok());
    SendOk(f, 1, lease, 1.5);
    // Its confirmation takes the lone worker next: finish it so the next job gets a lease.
    const v1::Job job = *f.scheduler->Get(out->job_id);
    REQUIRE(!job.confirmation_job_id().empty());
    REQUIRE(w->Leases().back().job_id() == job.confirmation_job_id());
    SendOk(f, 1, w->Leases().back(), 1.5);
    return std::make_pair(job, sink->events.back().message());
  };
  v1::SubmitRequest unranked = By("alice", "a");
  unranked.set_problem_id(2);
  auto [u, u_said] = run_ok(unranked);
  CHECK(u.shape_job_ids().empty());
  CHECK(u_said.find("shape") == std::string::npos);

  v1::SubmitRequest one_point = By("alice", "b");
  one_point.set_problem_id(3);
  one_point.set_ranked(true);
  auto [o, o_said] = run_ok(one_point);
  CHECK(o.shape_job_ids().empty());
  CHECK(o_said.find("no shape runs: problem 3 declares no ranked shape at W=2") !=
        std::string::npos);

  v1::SubmitRequest undeclared = By("alice", "c");  // problem 1: a catalog of before
  undeclared.set_ranked(true);
  auto [d, d_said] = run_ok(undeclared);
  CHECK(d.shape_job_ids().empty());
  CHECK(Confirmations(f.store.get()).size() == 3);  // one each, no shape run
}

TEST_CASE("a shape run whose original has no DONE is cancelled at restart",
          "[scheduler][confirm][shapes]") {
  Fixture f;
  f.options.secret_set_offset = 777;
  f.scheduler = std::make_unique<Scheduler>(f.store.get(), &f.clock, f.catalog.get(), f.options);
  v1::SubmitRequest req = By("carol", "p");
  req.set_problem_id(2);
  req.set_ranked(true);
  auto pending = f.scheduler->Submit(req);
  REQUIRE(pending.ok());
  v1::Job orphan = *f.scheduler->Get(pending->job_id);
  orphan.set_job_id("j-shape-orphan");
  orphan.set_confirms_job_id(pending->job_id);
  orphan.set_shape_run(true);
  orphan.mutable_request()->set_source("p");
  REQUIRE(f.store->CreateJob(orphan, nullptr).ok());
  f.scheduler = std::make_unique<Scheduler>(f.store.get(), &f.clock, f.catalog.get(), f.options);
  REQUIRE(f.scheduler->Recover().ok());
  f.scheduler->Flush();
  const v1::Job o = *f.scheduler->Get("j-shape-orphan");
  CHECK(o.stage() == v1::DONE);
  CHECK(o.result().status() == v1::CANCELLED);
  CHECK(f.scheduler->Get(pending->job_id)->stage() == v1::QUEUED);
}

}  // namespace
}  // namespace pkb
