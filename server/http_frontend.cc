#include "server/http_frontend.h"

#include <httplib.h>

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/files.h"
#include "common/leaderboard_export.h"
#include "common/status_macros.h"
#include "server/leaderboard.h"
#include "server/public_submission.h"
#include "spdlog/spdlog.h"

namespace pkb {
namespace {

constexpr const char* kJson = "application/json; charset=utf-8";

// Every route is GET or HEAD, whose bodies httplib does not read; a body of another method is
// read only up to this many bytes (413 past it) before the 404.
constexpr size_t kMaxPayload = 64 << 10;

// httplib's server with its connection handling replaced by HttpConnections: the accept loop
// hands each socket over at once, and a complete request comes back to httplib's own parsing,
// routing and response writing (process_request).
template <typename Base>
class BoundedServer : public Base {
 public:
  using Base::Base;

  void set_connections(HttpConnections* connections) { connections_ = connections; }
  bool ProcessRequest(httplib::Stream& stream, bool last, bool* closed) {
    bool connection_closed = false;
    bool ok = this->process_request(stream, last, connection_closed, nullptr);
    *closed = connection_closed;
    return ok;
  }

 private:
  bool process_and_close_socket(socket_t sock) override {
    connections_->Adopt(sock);
    return true;
  }

  HttpConnections* connections_ = nullptr;
};

template <typename Server>
std::unique_ptr<HttpConnections> Connect(Server* server, const HttpServerLimits& limits,
                                         SSL_CTX* tls) {
  auto connections = std::make_unique<HttpConnections>(
      limits, tls, [server](httplib::Stream& stream, bool last, bool* closed) {
        return server->ProcessRequest(stream, last, closed);
      });
  server->set_connections(connections.get());
  return connections;
}

void Error(httplib::Response& res, int code, const std::string& message) {
  res.status = code;
  std::string escaped;
  for (char c : message) {
    if (c == '"' || c == '\\') escaped.push_back('\\');
    if (static_cast<unsigned char>(c) >= 0x20) escaped.push_back(c);
  }
  res.set_content(absl::StrCat("{\"error\":\"", escaped, "\"}"), kJson);
}

int HttpCode(const absl::Status& st) {
  switch (st.code()) {
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kInvalidArgument:
      return 400;
    default:
      return 500;
  }
}

bool ParseTime(const std::string& text, int64_t* micros) {
  absl::Time t;
  std::string err;
  if (absl::ParseTime("%Y-%m-%d", text, absl::UTCTimeZone(), &t, &err) ||
      absl::ParseTime(absl::RFC3339_full, text, &t, &err)) {
    *micros = absl::ToUnixMicros(t);
    return true;
  }
  return absl::SimpleAtoi(text, micros);
}

// The query string's filter; INVALID_ARGUMENT names the bad parameter.
absl::StatusOr<v1::ResultFilter> Filter(const httplib::Request& req) {
  v1::ResultFilter f;
  auto text = [&](const char* name) {
    return req.has_param(name) ? req.get_param_value(name) : std::string();
  };
  auto integer = [&](const char* name, int32_t* out) {
    std::string v = text(name);
    return v.empty() || absl::SimpleAtoi(v, out);
  };
  int32_t problem = 0, world = 0;
  if (!integer("problem", &problem)) return absl::InvalidArgumentError("problem: not a number");
  if (!integer("world_size", &world)) return absl::InvalidArgumentError("world_size: not a number");
  f.set_problem_id(problem);
  f.set_world_size(world);
  f.set_gpu_class(text("gpu_class"));
  f.set_dtype(text("dtype"));
  f.set_submitter(text("submitter"));
  f.set_model(text("model"));
  f.set_agent(text("agent"));
  f.set_tag(text("tag"));
  for (const char* name : {"from", "to"}) {
    std::string v = text(name);
    if (v.empty()) continue;
    int64_t t;
    if (!ParseTime(v, &t))
      return absl::InvalidArgumentError(absl::StrCat(name, ": want YYYY-MM-DD or RFC 3339"));
    if (name[0] == 'f') {
      f.set_from_unix_micros(t);
    } else {
      f.set_to_unix_micros(t);
    }
  }
  std::string seeds = text("seeds");
  if (seeds == "public") {
    f.set_seeds(v1::SEEDS_PUBLIC);
  } else if (seeds == "secret") {
    f.set_seeds(v1::SEEDS_SECRET);
  } else if (!seeds.empty() && seeds != "any") {
    return absl::InvalidArgumentError("seeds: any, public or secret");
  }
  return f;
}

bool WantsCsv(const httplib::Request& req) {
  return req.has_param("format") && req.get_param_value("format") == "csv";
}

void Reply(const httplib::Request& req, httplib::Response& res,
           const google::protobuf::Message& message, const std::string& csv,
           const std::string& csv_name) {
  if (WantsCsv(req)) {
    res.set_header("Content-Disposition", absl::StrCat("attachment; filename=\"", csv_name, "\""));
    res.set_content(csv, "text/csv; charset=utf-8");
    return;
  }
  res.set_content(ToJson(message, /*pretty=*/false, /*include_defaults=*/true), kJson);
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpFrontend>> HttpFrontend::Start(
    HttpFrontendOptions options, JobStore* store, const ProblemCatalogIndex* catalog) {
  std::unique_ptr<HttpFrontend> f(new HttpFrontend());
  f->options_ = std::move(options);
  f->store_ = store;
  f->catalog_ = catalog;
  const HttpServerLimits& limits = f->options_.limits;
  if (!f->options_.tls_cert.empty() || !f->options_.tls_key.empty()) {
    auto tls = std::make_unique<BoundedServer<httplib::SSLServer>>(f->options_.tls_cert.c_str(),
                                                                   f->options_.tls_key.c_str());
    if (!tls->is_valid())
      return absl::InvalidArgumentError(absl::StrCat("web leaderboard: cannot use TLS cert ",
                                                     f->options_.tls_cert, " and key ",
                                                     f->options_.tls_key));
    f->connections_ = Connect(tls.get(), limits, tls->ssl_context());
    f->server_ = std::move(tls);
  } else {
    auto plain = std::make_unique<BoundedServer<httplib::Server>>();
    f->connections_ = Connect(plain.get(), limits, nullptr);
    f->server_ = std::move(plain);
  }
  PKB_RETURN_IF_ERROR(f->connections_->Start());
  // The accept loop only hands sockets over; one thread does.
  f->server_->new_task_queue = [] { return new httplib::ThreadPool(1); };
  f->server_->set_payload_max_length(kMaxPayload);
  f->Route();

  const std::string& listen = f->options_.listen;
  size_t colon = listen.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(listen.substr(colon + 1), &port))
    return absl::InvalidArgumentError(absl::StrCat("--http-listen ", listen, ": want host:port"));
  std::string host = listen.substr(0, colon);
  if (port == 0) {
    f->port_ = f->server_->bind_to_any_port(host);
  } else if (f->server_->bind_to_port(host, port)) {
    f->port_ = port;
  }
  if (f->port_ <= 0) return absl::UnavailableError(absl::StrCat("cannot listen on ", listen));
  f->thread_ = std::thread([raw = f.get()] { raw->server_->listen_after_bind(); });
  spdlog::info("web leaderboard on {}://{}:{}/ (read-only, public data)",
               f->options_.tls_cert.empty() ? "http" : "https", host, f->port_);
  return f;
}

void HttpFrontend::Route() {
  httplib::Server& s = *server_;
  s.set_default_headers({{"X-Content-Type-Options", "nosniff"},
                         {"Referrer-Policy", "no-referrer"},
                         {"Content-Security-Policy",
                          "default-src 'self'; style-src 'self'; img-src 'self' data:; "
                          "frame-ancestors 'none'"}});
  s.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  s.Get("/api/v1/problems", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(ToJson(catalog_->listing(), false, true), kJson);
  });
  s.Get("/api/v1/leaderboard", [this](const httplib::Request& req, httplib::Response& res) {
    absl::StatusOr<v1::ResultFilter> f = Filter(req);
    if (!f.ok()) return Error(res, 400, std::string(f.status().message()));
    v1::LeaderboardQuery q;
    *q.mutable_filter() = *f;
    if (req.has_param("by") && req.get_param_value("by") == "model")
      q.set_group_by(v1::GROUP_BY_MODEL);
    int32_t limit = 0;
    if (req.has_param("limit") && !absl::SimpleAtoi(req.get_param_value("limit"), &limit))
      return Error(res, 400, "limit: not a number");
    q.set_limit(limit);
    absl::StatusOr<v1::LeaderboardAnswer> a = QueryLeaderboard(store_, catalog_, q);
    if (!a.ok()) return Error(res, HttpCode(a.status()), std::string(a.status().message()));
    Reply(req, res, *a, WantsCsv(req) ? LeaderboardCsv(*a) : "", "pkb-leaderboard.csv");
  });
  s.Get("/api/v1/suite", [this](const httplib::Request& req, httplib::Response& res) {
    absl::StatusOr<v1::ResultFilter> f = Filter(req);
    if (!f.ok()) return Error(res, 400, std::string(f.status().message()));
    v1::SuiteQuery q;
    *q.mutable_filter() = *f;
    if (req.has_param("p")) {
      for (absl::string_view v : absl::StrSplit(req.get_param_value("p"), ',')) {
        double d;
        if (!absl::SimpleAtod(v, &d)) return Error(res, 400, "p: comma-separated numbers");
        q.add_p(d);
      }
    }
    if (req.has_param("problems")) {
      for (absl::string_view v : absl::StrSplit(req.get_param_value("problems"), ',')) {
        int32_t id;
        if (!absl::SimpleAtoi(v, &id)) return Error(res, 400, "problems: comma-separated ids");
        q.add_problem_ids(id);
      }
    }
    absl::StatusOr<v1::SuiteAnswer> a = QuerySuite(store_, *catalog_, q);
    if (!a.ok()) return Error(res, HttpCode(a.status()), std::string(a.status().message()));
    Reply(req, res, *a, WantsCsv(req) ? SuiteCsv(*a) : "", "pkb-suite.csv");
  });
  s.Get(R"(/api/v1/submissions/([A-Za-z0-9_.\-]{1,128}))", [this](const httplib::Request& req,
                                                                  httplib::Response& res) {
    std::string id = req.matches[1];
    absl::StatusOr<v1::Submission> sub = GetSubmission(store_, id, false);
    if (!sub.ok()) return Error(res, HttpCode(sub.status()), std::string(sub.status().message()));
    v1::Submission pub = PublicSubmission(std::move(*sub));
    Reply(req, res, pub, WantsCsv(req) ? SubmissionCsv(pub) : "", absl::StrCat("pkb-", id, ".csv"));
  });
  // The pages: from --web-root when given (development), else the copies built in.
  for (int i = 0; i < kWebAssetCount; ++i) {
    const WebAsset& a = kWebAssets[i];
    std::string path = a.path;
    const std::string type = absl::StrCat(a.content_type, "; charset=utf-8");
    auto handler = [this, a, type](const httplib::Request&, httplib::Response& res) {
      std::string name = std::string(a.path) == "/" ? "/index.html" : a.path;
      if (!options_.web_root.empty()) {
        absl::StatusOr<std::string> body = ReadFile(options_.web_root + name);
        if (!body.ok()) return Error(res, 404, std::string(body.status().message()));
        res.set_content(*body, type);
        return;
      }
      res.set_content(a.body, type);
    };
    s.Get(path, handler);
    if (path == "/") s.Get("/index.html", handler);
  }
  s.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.body.empty()) Error(res, res.status, absl::StrCat("HTTP ", res.status));
  });
}

void HttpFrontend::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
  if (connections_) connections_->Stop();
}

HttpFrontend::~HttpFrontend() { Stop(); }

}  // namespace pkb
