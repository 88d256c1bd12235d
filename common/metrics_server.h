// The HTTP endpoint of a long-running binary's Prometheus metrics and health.
//
//   auto registry = std::make_shared<prometheus::Registry>();
//   auto& jobs = prometheus::BuildCounter().Name("pkb_worker_jobs_total").Register(*registry);
//   auto server = MetricsServer::Start("0.0.0.0:9091", registry, {
//       .before_scrape = [&] { queue_depth.Set(...); },
//       .health = [&] { return connected ? absl::OkStatus() : absl::UnavailableError("..."); }});
//
// GET /metrics answers the registry in the Prometheus text format (0.0.4), after running
// `before_scrape` (gauges that mirror state are set there, so they are never stale). GET /healthz
// answers 200 "ok", or 503 with the reason when `health` says so (Kubernetes probes, load
// balancers). Nothing else is served. Thread-safe; the server stops when destroyed.
#ifndef PKB_COMMON_METRICS_SERVER_H_
#define PKB_COMMON_METRICS_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "prometheus/registry.h"

namespace httplib {
class Server;
}

namespace pkb {

struct MetricsHooks {
  std::function<void()> before_scrape;
  std::function<absl::Status()> health;
};

class MetricsServer {
 public:
  // `listen` is host:port; port 0 picks a free one (see port()).
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& listen, std::shared_ptr<prometheus::Registry> registry,
      MetricsHooks hooks);
  ~MetricsServer();
  int port() const { return port_; }

 private:
  MetricsServer() = default;
  std::shared_ptr<prometheus::Registry> registry_;
  MetricsHooks hooks_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

// Buckets for durations from milliseconds to an hour, in seconds.
const std::vector<double>& DurationBuckets();

}  // namespace pkb

#endif  // PKB_COMMON_METRICS_SERVER_H_
