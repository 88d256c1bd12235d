#include "common/metrics_server.h"

#include <httplib.h>

#include <atomic>
#include <catch2/catch.hpp>

#include "prometheus/counter.h"
#include "prometheus/gauge.h"

namespace pkb {
namespace {

TEST_CASE("metrics are served in the Prometheus text format and health follows its hook") {
  auto registry = std::make_shared<prometheus::Registry>();
  auto& jobs = prometheus::BuildCounter()
                   .Name("pkb_test_jobs_total")
                   .Help("jobs by status")
                   .Register(*registry);
  jobs.Add({{"status", "OK"}}).Increment(3);
  auto& depth = prometheus::BuildGauge().Name("pkb_test_queue_depth").Help("queued").Register(*registry);
  auto& gauge = depth.Add({});
  std::atomic<int> queued{5};
  std::atomic<bool> healthy{true};
  auto server = MetricsServer::Start(
      "127.0.0.1:0", registry,
      {.before_scrape = [&] { gauge.Set(queued); },
       .health = [&] {
         return healthy ? absl::OkStatus() : absl::UnavailableError("no coordinator");
       }});
  REQUIRE(server.ok());
  httplib::Client client("127.0.0.1", (*server)->port());
  auto m = client.Get("/metrics");
  REQUIRE(m);
  CHECK(m->status == 200);
  CHECK_THAT(m->body, Catch::Contains("pkb_test_jobs_total{status=\"OK\"} 3"));
  CHECK_THAT(m->body, Catch::Contains("pkb_test_queue_depth 5"));
  CHECK_THAT(m->body, Catch::Contains("# TYPE pkb_test_jobs_total counter"));
  queued = 9;  // read at scrape time
  CHECK_THAT(client.Get("/metrics")->body, Catch::Contains("pkb_test_queue_depth 9"));
  CHECK(client.Get("/healthz")->status == 200);
  healthy = false;
  auto h = client.Get("/healthz");
  CHECK(h->status == 503);
  CHECK_THAT(h->body, Catch::Contains("no coordinator"));
  CHECK(client.Get("/other")->status == 404);
}

TEST_CASE("a bad listen address is refused with its reason") {
  auto registry = std::make_shared<prometheus::Registry>();
  auto s = MetricsServer::Start("no-port", registry, {});
  REQUIRE_FALSE(s.ok());
  CHECK_THAT(std::string(s.status().message()), Catch::Contains("host:port"));
}

}  // namespace
}  // namespace pkb
