// The coordinator process in one object: store, catalog, scheduler, gRPC server (Evaluation,
// Worker, Leaderboard, grpc.health.v1, reflection), the thread that expires leases, and the web
// leaderboard when http_listen is set.
//
//   CoordinatorOptions opts;
//   opts.listen = "127.0.0.1:0";
//   opts.store = "/tmp/pkb.db";                      // or "postgresql://pkb@db/pkb"
//   opts.engine = "build/worker/engine/pkb-eval";   // its --catalog lists the problems
//   PKB_ASSIGN_OR_RETURN(std::unique_ptr<Coordinator> c, Coordinator::Start(opts));
//   int port = c->port();
//   c->Wait();   // or c->Shutdown()
#ifndef PKB_SERVER_COORDINATOR_H_
#define PKB_SERVER_COORDINATOR_H_

#include <grpcpp/server.h>

#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "common/metrics_server.h"
#include "server/admin_service.h"
#include "server/coordinator_metrics.h"
#include "server/evaluation_service.h"
#include "server/http_frontend.h"
#include "server/job_store.h"
#include "server/leaderboard_service.h"
#include "server/problem_catalog.h"
#include "server/scheduler.h"
#include "server/worker_service.h"

namespace pkb {

struct CoordinatorOptions {
  std::string listen = "127.0.0.1:7311";  // host:port; port 0 picks a free one
  // Where jobs are kept: a SQLite file (the default), or a PostgreSQL database named by a
  // "postgresql://" URI (see OpenJobStore in server/job_store.h).
  std::string store = "pkb-coordinator.db";
  std::string catalog_json;  // a file with a pkb.v1.ProblemCatalog as JSON, or ...
  std::string engine;        // ... the engine binary, run with --catalog
  absl::Duration tick = absl::Milliseconds(200);
  std::string tls_cert;  // PEM files; both set: serve TLS only
  std::string tls_key;
  std::string tokens_file;  // empty: open (loopback, tests); see server/auth.h
  double submit_rate = 20;  // per token, per second
  double submit_burst = 100;
  SchedulerOptions scheduler;
  // How long GetProblem answers a problem's reference times from memory (server/reference_times.h).
  absl::Duration reference_times_ttl = absl::Seconds(30);
  std::string http_listen;  // host:port of the web leaderboard (server/http_frontend.h); empty: off
  std::string web_root;     // its pages from this folder instead of the built-in copies
  HttpServerLimits http_limits;  // its threads, timeouts and connection limit
  // host:port of Prometheus /metrics and /healthz (common/metrics_server.h); empty: off.
  std::string metrics_listen;
};

class Coordinator {
 public:
  static absl::StatusOr<std::unique_ptr<Coordinator>> Start(CoordinatorOptions options);
  ~Coordinator();

  int port() const { return port_; }
  int http_port() const { return http_ ? http_->port() : 0; }
  int metrics_port() const { return metrics_server_ ? metrics_server_->port() : 0; }
  Scheduler* scheduler() { return scheduler_.get(); }
  void Wait();
  void Shutdown();

 private:
  Coordinator() = default;

  CoordinatorOptions options_;
  std::unique_ptr<JobStore> store_;
  RealClock clock_;
  std::unique_ptr<ProblemCatalogIndex> catalog_;
  std::unique_ptr<TokenAuth> auth_;
  std::unique_ptr<CoordinatorMetrics> metrics_;  // outlives the scheduler that reports to it
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<ReferenceTimes> reference_times_;
  std::unique_ptr<EvaluationService> evaluation_;
  std::unique_ptr<WorkerService> worker_;
  std::unique_ptr<LeaderboardService> leaderboard_;
  std::unique_ptr<AdminService> admin_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<HttpFrontend> http_;
  std::unique_ptr<MetricsServer> metrics_server_;
  int port_ = 0;
  absl::Notification stop_;
  std::thread ticker_;
};

}  // namespace pkb

#endif  // PKB_SERVER_COORDINATOR_H_
