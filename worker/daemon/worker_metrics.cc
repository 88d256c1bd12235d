#include "worker/daemon/worker_metrics.h"

#include "common/metrics_server.h"

namespace pkb {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

}  // namespace

WorkerMetrics::WorkerMetrics(const v1::WorkerCapabilities& caps,
                             std::function<void()> on_first_connect)
    : registry_(std::make_shared<prometheus::Registry>()),
      jobs_(BuildCounter()
                .Name("pkb_worker_jobs_total")
                .Help("Evaluations this worker ran, by verdict")
                .Register(*registry_)),
      stage_seconds_(BuildHistogram()
                         .Name("pkb_worker_stage_duration_seconds")
                         .Help("Time of each engine stage (compile, verify, benchmark, run)")
                         .Register(*registry_)),
      compile_cache_(BuildCounter()
                         .Name("pkb_worker_compile_cache_total")
                         .Help("Compiles answered by the compile cache (hit) or nvcc (miss)")
                         .Register(*registry_)),
      job_seconds_(BuildHistogram()
                       .Name("pkb_worker_job_duration_seconds")
                       .Help("Lease to verdict of one evaluation on this worker")
                       .Register(*registry_)
                       .Add({}, DurationBuckets())),
      connected_(BuildGauge()
                     .Name("pkb_worker_connected")
                     .Help("1 while registered with the coordinator")
                     .Register(*registry_)
                     .Add({})),
      busy_(BuildGauge()
                .Name("pkb_worker_busy")
                .Help("1 while an evaluation runs")
                .Register(*registry_)
                .Add({})),
      gpu_healthy_(BuildGauge()
                       .Name("pkb_worker_gpu_healthy")
                       .Help("0 after a failed GPU check (the worker then takes no jobs)")
                       .Register(*registry_)
                       .Add({})),
      reconnects_(BuildCounter()
                      .Name("pkb_worker_stream_ends_total")
                      .Help("Streams to the coordinator that ended (the worker reconnects)")
                      .Register(*registry_)
                      .Add({})),
      on_first_connect_(std::move(on_first_connect)) {
  gpu_healthy_.Set(1);
  BuildGauge()
      .Name("pkb_worker_info")
      .Help("Always 1; what this worker offers")
      .Register(*registry_)
      .Add({{"gpu_class", caps.gpu_class()},
            {"harness_version", caps.harness_version()},
            {"max_world_size", std::to_string(caps.max_world_size())}})
      .Set(1);
}

void WorkerMetrics::Connected(bool connected) {
  connected_.Set(connected ? 1 : 0);
  if (!connected) {
    reconnects_.Increment();
    return;
  }
  if (!ever_connected_.exchange(true) && on_first_connect_) on_first_connect_();
}

void WorkerMetrics::JobStarted() { busy_.Set(1); }

void WorkerMetrics::JobFinished(const v1::EvalResult& result, absl::Duration took) {
  busy_.Set(0);
  jobs_.Add({{"status", v1::Status_Name(result.status())}}).Increment();
  job_seconds_.Observe(absl::ToDoubleSeconds(took));
  for (const auto& [stage, seconds] : result.stage_seconds()) {
    if (stage != "compile" && stage != "verify" && stage != "benchmark" && stage != "run") continue;
    stage_seconds_.Add({{"stage", stage}}, DurationBuckets()).Observe(seconds);
  }
  if (result.has_compile()) {
    compile_cache_.Add({{"result", result.compile().cache_hit() ? "hit" : "miss"}}).Increment();
  }
}

void WorkerMetrics::HealthChecked(bool healthy) { gpu_healthy_.Set(healthy ? 1 : 0); }

}  // namespace pkb
