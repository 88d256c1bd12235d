#include "server/coordinator_metrics.h"

#include "common/metrics_server.h"

namespace pkb {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

prometheus::Gauge& Gauge(prometheus::Registry& r, const std::string& name, const std::string& help) {
  return BuildGauge().Name(name).Help(help).Register(r).Add({});
}

}  // namespace

CoordinatorMetrics::CoordinatorMetrics(const std::string& harness_version)
    : registry_(std::make_shared<prometheus::Registry>()),
      submitted_(BuildCounter()
                     .Name("pkb_jobs_submitted_total")
                     .Help("Accepted submissions, by outcome: a new job, joined to an identical "
                           "one in flight, answered from the cache, or a confirmation run the "
                           "coordinator queued itself")
                     .Register(*registry_)),
      finished_(BuildCounter()
                    .Name("pkb_jobs_finished_total")
                    .Help("Jobs that reached DONE, by verdict and whether the cache answered")
                    .Register(*registry_)),
      stage_seconds_(BuildHistogram()
                         .Name("pkb_job_stage_duration_seconds")
                         .Help("Time of each engine stage of finished jobs, as the worker reports "
                               "it (compile, verify, benchmark, run)")
                         .Register(*registry_)),
      job_seconds_(BuildHistogram()
                       .Name("pkb_job_duration_seconds")
                       .Help("Submission to verdict of jobs that ran (queueing included)")
                       .Register(*registry_)
                       .Add({}, DurationBuckets())),
      leases_lost_(BuildCounter()
                       .Name("pkb_leases_lost_total")
                       .Help("Leases taken back from a worker (silence, disconnect, expiry)")
                       .Register(*registry_)
                       .Add({})),
      queue_depth_(Gauge(*registry_, "pkb_queue_depth", "Jobs waiting for a worker")),
      leased_(Gauge(*registry_, "pkb_jobs_running", "Jobs leased to a worker")),
      workers_(Gauge(*registry_, "pkb_workers_connected", "Worker streams connected")),
      idle_workers_(Gauge(*registry_, "pkb_workers_idle", "Connected workers without a job")),
      unhealthy_workers_(Gauge(*registry_, "pkb_workers_unhealthy",
                               "Connected workers that report a failed GPU check")),
      watchers_(Gauge(*registry_, "pkb_watch_streams", "Open event streams of clients")) {
  BuildGauge()
      .Name("pkb_build_info")
      .Help("Always 1; the harness version jobs of this coordinator require")
      .Register(*registry_)
      .Add({{"harness_version", harness_version}})
      .Set(1);
}

void CoordinatorMetrics::JobSubmitted(const char* outcome) {
  submitted_.Add({{"outcome", outcome}}).Increment();
}

void CoordinatorMetrics::JobFinished(const v1::Job& job, bool cached, absl::Time now) {
  finished_.Add({{"status", v1::Status_Name(job.result().status())},
                 {"cached", cached ? "true" : "false"}})
      .Increment();
  if (cached) return;
  double total = absl::ToDoubleSeconds(now - absl::FromUnixMicros(job.created_unix_micros()));
  if (total >= 0) job_seconds_.Observe(total);
  for (const auto& [stage, seconds] : job.result().stage_seconds()) {
    // Only the engine's own stages: the map comes from the worker, so its keys are not trusted
    // to be few.
    if (stage != "compile" && stage != "verify" && stage != "benchmark" && stage != "run") continue;
    stage_seconds_.Add({{"stage", stage}}, DurationBuckets()).Observe(seconds);
  }
}

void CoordinatorMetrics::LeaseLost() { leases_lost_.Increment(); }

void CoordinatorMetrics::Refresh(const SchedulerStats& s) {
  queue_depth_.Set(s.queued);
  leased_.Set(s.leased);
  workers_.Set(s.workers);
  idle_workers_.Set(s.idle_workers);
  unhealthy_workers_.Set(s.unhealthy_workers);
  watchers_.Set(s.watchers);
}

}  // namespace pkb
