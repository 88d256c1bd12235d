#include "server/coordinator.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace pkb {

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Start(CoordinatorOptions options) {
  std::unique_ptr<Coordinator> c(new Coordinator());
  c->options_ = std::move(options);
  const CoordinatorOptions& o = c->options_;
  if (o.scheduler.harness_version.empty()) {
    return absl::InvalidArgumentError("the harness version is not set");
  }
  PKB_ASSIGN_OR_RETURN(c->store_, OpenJobStore(o.store));
  absl::StatusOr<ProblemCatalogIndex> catalog = absl::FailedPreconditionError(
      "no problem catalog: give --catalog-json FILE or --engine PATH (pkb-eval, run with "
      "--catalog)");
  if (!o.catalog_json.empty()) {
    PKB_ASSIGN_OR_RETURN(std::string json, ReadFile(o.catalog_json));
    catalog = ProblemCatalogIndex::FromJson(json);
  } else if (!o.engine.empty()) {
    catalog = ProblemCatalogIndex::FromEngine(o.engine);
  }
  if (!catalog.ok()) return catalog.status();
  c->catalog_ = std::make_unique<ProblemCatalogIndex>(std::move(*catalog));
  spdlog::info("catalog: {} problems", c->catalog_->catalog().problems_size());

  if (o.tokens_file.empty()) {
    c->auth_ = std::make_unique<TokenAuth>();
    spdlog::warn("no --tokens file: every caller is an anonymous admin (use on loopback only)");
  } else {
    PKB_ASSIGN_OR_RETURN(c->auth_,
                         TokenAuth::FromFile(o.tokens_file, o.submit_rate, o.submit_burst));
  }
  SchedulerOptions scheduler_options = o.scheduler;
  // A request may name the classes configured here and those the worker tokens grant.
  if (!scheduler_options.gpu_classes.empty() || c->auth_->enabled()) {
    for (const std::string& g : c->auth_->GrantedGpuClasses())
      scheduler_options.gpu_classes.insert(g);
  }
  if (!o.metrics_listen.empty()) {
    c->metrics_ = std::make_unique<CoordinatorMetrics>(o.scheduler.harness_version);
    scheduler_options.observer = c->metrics_.get();
  }
  c->scheduler_ = std::make_unique<Scheduler>(c->store_.get(), &c->clock_, c->catalog_.get(),
                                              scheduler_options);
  PKB_RETURN_IF_ERROR(c->scheduler_->Recover());
  c->reference_times_ = std::make_unique<ReferenceTimes>(c->store_.get(), o.reference_times_ttl);
  c->evaluation_ = std::make_unique<EvaluationService>(c->scheduler_.get(), c->catalog_.get(),
                                                       c->auth_.get(), c->reference_times_.get());
  c->worker_ = std::make_unique<WorkerService>(c->scheduler_.get(), c->auth_.get());
  c->leaderboard_ =
      std::make_unique<LeaderboardService>(c->store_.get(), c->catalog_.get(), c->auth_.get());
  c->admin_ = std::make_unique<AdminService>(c->scheduler_.get(), c->auth_.get());

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
  if (!o.tls_cert.empty() || !o.tls_key.empty()) {
    grpc::SslServerCredentialsOptions ssl;
    grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
    PKB_ASSIGN_OR_RETURN(pair.cert_chain, ReadFile(o.tls_cert));
    PKB_ASSIGN_OR_RETURN(pair.private_key, ReadFile(o.tls_key));
    ssl.pem_key_cert_pairs.push_back(std::move(pair));
    creds = grpc::SslServerCredentials(ssl);
  }
  builder.AddListeningPort(o.listen, creds, &c->port_);
  builder.RegisterService(c->evaluation_.get());
  builder.RegisterService(c->worker_.get());
  builder.RegisterService(c->leaderboard_.get());
  builder.RegisterService(c->admin_.get());
  builder.SetMaxReceiveMessageSize(4 << 20);
  c->server_ = builder.BuildAndStart();
  if (!c->server_ || c->port_ == 0)
    return absl::UnavailableError(absl::StrCat("cannot listen on ", o.listen));
  if (!o.http_listen.empty()) {
    HttpFrontendOptions web;
    web.listen = o.http_listen;
    web.web_root = o.web_root;
    web.limits = o.http_limits;
    web.tls_cert = o.tls_cert;
    web.tls_key = o.tls_key;
    PKB_ASSIGN_OR_RETURN(c->http_, HttpFrontend::Start(web, c->store_.get(), c->catalog_.get()));
  }
  if (c->metrics_) {
    Coordinator* raw = c.get();
    MetricsHooks hooks;
    hooks.before_scrape = [raw] { raw->metrics_->Refresh(raw->scheduler_->Stats()); };
    // Serving once Start returns; /healthz is what a probe asks before and after that.
    hooks.health = [raw] {
      return raw->stop_.HasBeenNotified() ? absl::UnavailableError("shutting down")
                                          : absl::OkStatus();
    };
    PKB_ASSIGN_OR_RETURN(c->metrics_server_,
                         MetricsServer::Start(o.metrics_listen, c->metrics_->registry(), hooks));
  }
  c->ticker_ = std::thread([raw = c.get()] {
    while (!raw->stop_.WaitForNotificationWithTimeout(raw->options_.tick)) raw->scheduler_->Tick();
  });
  spdlog::info("coordinator listening on port {} (store {})", c->port_,
               RedactStoreLocation(o.store));
  return c;
}

void Coordinator::Wait() { server_->Wait(); }

void Coordinator::Shutdown() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (ticker_.joinable()) ticker_.join();
  // A Check waiting for a compile would hold the server's shutdown until its deadline.
  if (scheduler_) scheduler_->AbandonCompiles("the coordinator is shutting down");
  if (http_) http_->Stop();
  metrics_server_.reset();
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

Coordinator::~Coordinator() { Shutdown(); }

}  // namespace pkb
