#include "tests/service/cluster.h"

namespace pkb {
namespace service_test {

std::string Slurp(const std::string& path) {
  auto s = ReadFile(path);
  return s.ok() ? *s : "";
}

// Reads a stream to its end; stops early after `max_events`.
std::vector<v1::EvalEvent> ReadAll(grpc::ClientReader<v1::EvalEvent>* reader, grpc::Status* status,
                                   size_t max_events) {
  std::vector<v1::EvalEvent> events;
  v1::EvalEvent e;
  while (events.size() < max_events && reader->Read(&e)) events.push_back(e);
  if (events.size() < max_events) *status = reader->Finish();
  return events;
}

std::vector<v1::EvalEvent> Watch(Cluster& c, const std::string& job_id, grpc::Status* status,
                                 int64_t after) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  v1::WatchRequest w;
  w.set_job_id(job_id);
  w.set_after_sequence(after);
  auto reader = c.stub->Watch(&ctx, w);
  return ReadAll(reader.get(), status);
}

// Follows a result's confirmation run to its end (as `token`, when given); its DONE event. Tests
// that count engine runs wait for it, since the run the coordinator adds ends on its own time.
v1::EvalEvent AwaitConfirmation(Cluster& c, const v1::EvalResult& result,
                                const std::string& token) {
  REQUIRE(!result.confirmation_job_id().empty());
  std::vector<v1::EvalEvent> events;
  grpc::Status st;
  // Reattached while the coordinator (just restarted) is unavailable, as a client does.
  for (int attempt = 0; attempt < 50; ++attempt) {
    grpc::ClientContext ctx;
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::WatchRequest w;
    w.set_job_id(result.confirmation_job_id());
    w.set_after_sequence(events.empty() ? 0 : events.back().sequence());
    auto reader = c.stub->Watch(&ctx, w);
    std::vector<v1::EvalEvent> more = ReadAll(reader.get(), &st);
    events.insert(events.end(), more.begin(), more.end());
    if (st.error_code() != grpc::StatusCode::UNAVAILABLE) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  INFO(st.error_message());
  REQUIRE(st.ok());
  REQUIRE(!events.empty());
  REQUIRE(events.back().stage() == v1::DONE);
  return events.back();
}

size_t EngineRuns(Cluster& c) {
  std::string runs = Slurp(c.dir + "/engine_runs.log");
  return std::count(runs.begin(), runs.end(), '\n');
}

void CheckSequence(const std::vector<v1::EvalEvent>& events) {
  for (size_t i = 0; i < events.size(); ++i) CHECK(events[i].sequence() == int64_t(i + 1));
}

// The real engine when built (or named by PKB_TEST_ENGINE), else the test double.
std::string Engine() {
  if (const char* e = std::getenv("PKB_TEST_ENGINE")) return e;
  return std::string(PKB_REAL_ENGINE).empty() ? PKB_FAKE_ENGINE : PKB_REAL_ENGINE;
}

// A token's metadata on a fresh context.
std::unique_ptr<grpc::ClientContext> As(const std::string& token) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  return ctx;
}

// Submits as `token` and reads the stream to its end.
std::vector<v1::EvalEvent> SubmitAs(Cluster& c, const std::string& token,
                                    const v1::SubmitRequest& r, grpc::Status* st) {
  auto ctx = As(token);
  auto reader = c.stub->Submit(ctx.get(), r);
  return ReadAll(reader.get(), st);
}

// The first event of a submission (its job id), leaving the stream to run on in `reader`.
std::string FirstEvent(grpc::ClientReader<v1::EvalEvent>* reader) {
  v1::EvalEvent e;
  return reader->Read(&e) ? e.job_id() : "";
}

// Waits until the coordinator's log says `what` (a worker connected), at most 30 s.
std::string HostCandidate(const std::string& name) {
  const std::string cpu_dir = std::string(PKB_SOURCE_DIR) + "/tests/engine/cpu_candidates/";
  std::string common = ReadFile(cpu_dir + "common.h").value();
  common.replace(common.find("#pragma once"), strlen("#pragma once"), "");
  std::string host = ReadFile(cpu_dir + name).value();
  host.replace(host.find("#include \"common.h\""), strlen("#include \"common.h\""), common);
  return host;
}

void AwaitLog(Cluster& c, const std::string& what) {
  for (int i = 0; i < 1500 && Slurp(c.dir + "/coordinator.log").find(what) == std::string::npos;
       ++i)
    absl::SleepFor(absl::Milliseconds(20));
  REQUIRE(Slurp(c.dir + "/coordinator.log").find(what) != std::string::npos);
}

}  // namespace service_test
}  // namespace pkb
