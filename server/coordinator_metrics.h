// The coordinator's Prometheus metrics (docs/operations.md lists them). Counters and histograms
// are fed by the scheduler as jobs move; gauges mirror Scheduler::Stats() at each scrape.
// Labels are bounded sets (outcome, status, stage, cached): never a job or worker id.
//
// Thread-safe (prometheus-cpp's metrics are).
#ifndef PKB_SERVER_COORDINATOR_METRICS_H_
#define PKB_SERVER_COORDINATOR_METRICS_H_

#include <memory>
#include <string>

#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/scheduler.h"

namespace pkb {

class CoordinatorMetrics : public SchedulerObserver {
 public:
  explicit CoordinatorMetrics(const std::string& harness_version);

  void JobSubmitted(const char* outcome) override;
  void JobFinished(const v1::Job& job, bool cached, absl::Time now) override;
  void LeaseLost() override;
  // Sets the gauges from the scheduler's current state.
  void Refresh(const SchedulerStats& stats);

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& submitted_;
  prometheus::Family<prometheus::Counter>& finished_;
  prometheus::Family<prometheus::Histogram>& stage_seconds_;
  prometheus::Histogram& job_seconds_;
  prometheus::Counter& leases_lost_;
  prometheus::Gauge& queue_depth_;
  prometheus::Gauge& leased_;
  prometheus::Gauge& workers_;
  prometheus::Gauge& idle_workers_;
  prometheus::Gauge& unhealthy_workers_;
  prometheus::Gauge& watchers_;
};

}  // namespace pkb

#endif  // PKB_SERVER_COORDINATOR_METRICS_H_
