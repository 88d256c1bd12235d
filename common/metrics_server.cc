#include "common/metrics_server.h"

#include <httplib.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "prometheus/text_serializer.h"

namespace pkb {

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& listen, std::shared_ptr<prometheus::Registry> registry,
    MetricsHooks hooks) {
  size_t colon = listen.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(listen.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics listen address '", listen, "': want host:port"));
  }
  std::string host = listen.substr(0, colon);
  std::unique_ptr<MetricsServer> s(new MetricsServer());
  s->registry_ = std::move(registry);
  s->hooks_ = std::move(hooks);
  s->server_ = std::make_unique<httplib::Server>();
  MetricsServer* self = s.get();
  s->server_->Get("/metrics", [self](const httplib::Request&, httplib::Response& res) {
    if (self->hooks_.before_scrape) self->hooks_.before_scrape();
    prometheus::TextSerializer text;
    res.set_content(text.Serialize(self->registry_->Collect()),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  s->server_->Get("/healthz", [self](const httplib::Request&, httplib::Response& res) {
    absl::Status st = self->hooks_.health ? self->hooks_.health() : absl::OkStatus();
    res.status = st.ok() ? 200 : 503;
    res.set_content(st.ok() ? "ok\n" : std::string(st.message()) + "\n", "text/plain");
  });
  int bound = port == 0 ? s->server_->bind_to_any_port(host) : s->server_->bind_to_port(host, port)
                                                                      ? port
                                                                      : -1;
  if (bound <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", listen, " for metrics"));
  }
  s->port_ = bound;
  s->thread_ = std::thread([self] { self->server_->listen_after_bind(); });
  return s;
}

MetricsServer::~MetricsServer() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

const std::vector<double>& DurationBuckets() {
  static const std::vector<double> b = {0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1,   2.5,
                                        5,     10,    30,   60,   120, 300,  600, 1800, 3600};
  return b;
}

}  // namespace pkb
