// The worker daemon's Prometheus metrics (docs/operations.md lists them), fed by the daemon
// through WorkerObserver. Its /healthz answers while the process serves: connected or retrying,
// and also after a failed GPU check (the worker says so upstream and takes no jobs; a restart
// would not fix the GPU). Labels are bounded sets (status, stage, result): never a job id.
//
// Thread-safe.
#ifndef PKB_WORKER_DAEMON_WORKER_METRICS_H_
#define PKB_WORKER_DAEMON_WORKER_METRICS_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "worker/daemon/worker_daemon.h"

namespace pkb {

class WorkerMetrics : public WorkerObserver {
 public:
  // `on_first_connect` runs once, when the daemon first registers (systemd's READY=1).
  WorkerMetrics(const v1::WorkerCapabilities& caps, std::function<void()> on_first_connect);

  void Connected(bool connected) override;
  void JobStarted() override;
  void JobFinished(const v1::EvalResult& result, absl::Duration took) override;
  void HealthChecked(bool healthy) override;

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& jobs_;
  prometheus::Family<prometheus::Histogram>& stage_seconds_;
  prometheus::Family<prometheus::Counter>& compile_cache_;
  prometheus::Histogram& job_seconds_;
  prometheus::Gauge& connected_;
  prometheus::Gauge& busy_;
  prometheus::Gauge& gpu_healthy_;
  prometheus::Counter& reconnects_;
  std::function<void()> on_first_connect_;
  std::atomic<bool> ever_connected_{false};
};

}  // namespace pkb

#endif  // PKB_WORKER_DAEMON_WORKER_METRICS_H_
