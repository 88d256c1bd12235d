// pkb-coordinator: the PKB evaluation service's coordinator (see docs/service.md).
#include <csignal>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "common/config.h"
#include "common/files.h"
#include "common/harness_version.h"
#include "common/logging.h"
#include "common/systemd.h"
#include "server/coordinator.h"
#include "spdlog/spdlog.h"

namespace {
std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }
}  // namespace

int main(int argc, char** argv) {
  pkb::CoordinatorOptions o;
  o.scheduler.harness_version = pkb::HarnessVersion();
  double heartbeat_s = 2, lease_timeout_s = 10, job_deadline_s = 1800;
  std::string port_file;
  CLI::App app{"PKB coordinator: queues evaluations, leases them to workers, streams their events"};
  pkb::PrepareConfig(app);
  app.add_option("--listen", o.listen, "host:port to serve on (port 0: pick one)")
      ->capture_default_str();
  // From the environment as PKB_COORDINATOR_STORE (common/config.h), which keeps a URI that holds
  // a password out of `ps`.
  app.add_option("--store,--db", o.store,
                 "where every job and event is kept: a SQLite file, or a PostgreSQL database as "
                 "postgresql://[user@][host][:port]/dbname[?param=value...] (libpq's PG* "
                 "variables and ~/.pgpass fill in what the URI leaves out)")
      ->capture_default_str();
  app.add_option("--catalog-json", o.catalog_json, "pkb.v1.ProblemCatalog as JSON");
  app.add_option("--engine", o.engine, "pkb-eval binary whose --catalog lists the problems");
  double reference_times_ttl_s = absl::ToDoubleSeconds(o.reference_times_ttl);
  app.add_option("--reference-times-ttl", reference_times_ttl_s,
                 "seconds GetProblem's reference times are answered from memory")
      ->capture_default_str();
  app.add_option("--heartbeat-interval", heartbeat_s, "seconds between worker heartbeats")
      ->capture_default_str();
  app.add_option("--lease-timeout", lease_timeout_s,
                 "seconds of worker silence that lose its lease")
      ->capture_default_str();
  app.add_option("--max-attempts", o.scheduler.max_attempts,
                 "leases a job may lose before WORKER_LOST")
      ->capture_default_str();
  app.add_option("--job-deadline", job_deadline_s, "seconds a worker lets one evaluation run")
      ->capture_default_str();
  app.add_option("--default-gpu-class", o.scheduler.default_gpu_class,
                 "gpu class of submissions that name none ('any' matches every worker)")
      ->capture_default_str();
  std::vector<std::string> gpu_classes;
  app.add_option("--gpu-classes", gpu_classes,
                 "GPU classes a request may name besides 'any' (comma-separated; the worker "
                 "tokens' classes are added). Default: any well-formed name without --tokens, the "
                 "tokens' classes with it")
      ->delimiter(',');
  double queue_deadline_s = absl::ToDoubleSeconds(o.scheduler.queue_deadline);
  app.add_option("--queue-deadline", queue_deadline_s,
                 "seconds a job may wait for a worker before it ends CANCELLED")
      ->capture_default_str();
  app.add_option("--compile-ahead", o.scheduler.compile_ahead,
                 "compile queued jobs' sources on busy workers that could run them, which then "
                 "take those jobs first (true or false)")
      ->capture_default_str();
  app.add_option("--harness-version", o.scheduler.harness_version, "harness version jobs require")
      ->capture_default_str();
  app.add_option("--tls-cert", o.tls_cert, "PEM certificate chain: serve TLS only");
  app.add_option("--tls-key", o.tls_key, "PEM private key of --tls-cert");
  app.add_option("--tokens", o.tokens_file,
                 "file of `token role name` lines; without it, no authentication");
  app.add_option("--submit-rate", o.submit_rate, "submissions per second per token")
      ->capture_default_str();
  app.add_option("--submit-burst", o.submit_burst, "burst of submissions per token")
      ->capture_default_str();
  app.add_option("--port-file", port_file, "write the bound port here once serving");
  std::string http_port_file;
  app.add_option("--http-listen", o.http_listen,
                 "host:port of the web leaderboard: read-only public JSON, CSV and pages "
                 "(docs/leaderboard.md); HTTPS with --tls-cert; off by default");
  app.add_option("--web-root", o.web_root,
                 "serve the web pages from this folder instead of the built-in copies");
  app.add_option("--http-port-file", http_port_file, "write the web leaderboard's port here");
  // Waiting connections hold no thread (server/http_connections.h): these bound what one slow or
  // idle client costs, and what a flood of them can hold open.
  pkb::HttpServerLimits& web = o.http_limits;
  double http_idle_s = absl::ToDoubleSeconds(web.idle_timeout);
  double http_request_s = absl::ToDoubleSeconds(web.request_timeout);
  double http_write_s = absl::ToDoubleSeconds(web.write_timeout);
  app.add_option("--http-threads", web.threads,
                 "threads that run web requests (idle and slow connections hold none)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--http-max-connections", web.max_connections,
                 "web connections open at once; more are closed at accept")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--http-idle-timeout", http_idle_s,
                 "seconds a web connection may wait for its next request (TLS handshake included)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--http-request-timeout", http_request_s,
                 "seconds from a web request's first byte to its last; slower clients get 408")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--http-write-timeout", http_write_s,
                 "seconds to deliver one web response; a client not reading it is dropped")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  std::string secret_seed_file;
  app.add_option("--secret-seed-file", secret_seed_file,
                 "file holding the secret input seed offset (a non-zero integer) of ranked "
                 "submissions; without it, ranked submissions are refused");
  app.add_option("--metrics-listen", o.metrics_listen,
                 "host:port of Prometheus /metrics and /healthz (empty: off)");
  std::string log_format = "text";
  app.add_option("--log-format", log_format, "text, or json: one object per line")
      ->capture_default_str();
  int exit_code = 0;
  if (!pkb::ParseConfig(app, argc, argv, "PKB_COORDINATOR", &exit_code)) return exit_code;
  if (absl::Status st = pkb::ConfigureLogging(log_format, "pkb-coordinator"); !st.ok()) {
    spdlog::error("{}", std::string(st.message()));
    return 2;
  }
  // Abseil's lock-cycle detection showed in profiles of the coordinator under load.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  o.scheduler.heartbeat_interval = absl::Seconds(heartbeat_s);
  o.reference_times_ttl = absl::Seconds(reference_times_ttl_s);
  o.scheduler.lease_timeout = absl::Seconds(lease_timeout_s);
  o.scheduler.job_deadline = absl::Seconds(job_deadline_s);
  o.scheduler.queue_deadline = absl::Seconds(queue_deadline_s);
  o.scheduler.gpu_classes.insert(gpu_classes.begin(), gpu_classes.end());
  web.idle_timeout = absl::Seconds(http_idle_s);
  web.request_timeout = absl::Seconds(http_request_s);
  web.write_timeout = absl::Seconds(http_write_s);
  if (!secret_seed_file.empty()) {
    auto text = pkb::ReadFile(secret_seed_file);
    if (!text.ok() ||
        !absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &o.scheduler.secret_set_offset) ||
        o.scheduler.secret_set_offset == 0) {
      spdlog::error("--secret-seed-file {}: want one non-zero integer", secret_seed_file);
      return 2;
    }
  }

  auto c = pkb::Coordinator::Start(o);
  if (!c.ok()) {
    spdlog::error("{}", c.status().ToString());
    return 1;
  }
  // Before --port-file: a script that waited for that one finds this one too.
  if (!http_port_file.empty()) {
    std::string tmp = http_port_file + ".tmp";
    if (FILE* f = fopen(tmp.c_str(), "w")) {
      fprintf(f, "%d\n", (*c)->http_port());
      fclose(f);
      rename(tmp.c_str(), http_port_file.c_str());
    }
  }
  if (!port_file.empty()) {
    std::string tmp = port_file + ".tmp";
    if (FILE* f = fopen(tmp.c_str(), "w")) {
      fprintf(f, "%d\n", (*c)->port());
      fclose(f);
      rename(tmp.c_str(), port_file.c_str());
    }
  }
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  pkb::NotifySystemd("READY=1");
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  pkb::NotifySystemd("STOPPING=1");
  spdlog::info("shutting down");
  (*c)->Shutdown();
  return 0;
}
