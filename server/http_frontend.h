// The web leaderboard: read-only JSON and CSV over HTTP, plus the static pages (server/web/,
// compiled into the binary) that draw it. Served by the coordinator when --http-listen is set.
//
// What it serves is public by design, and it has no authentication: the leaderboard and suite
// (what ranks), the problem catalog, and one submission's verdict, timings and events by job id,
// as PublicSubmission (public_submission.h) builds them: never a submission's source, compiler
// output, diagnostics, rank logs or any free text a submission, compiler or worker wrote (they can
// quote the source), nor the list of all submissions; GET and HEAD only. With the coordinator's
// --tls-cert/--tls-key it serves HTTPS with the same certificate, else plain HTTP.
//
// Connections are held by HttpConnections (http_connections.h), not by threads: idle and slow
// clients are dropped at their deadlines and cannot keep /healthz or anyone else waiting.
//
//   HttpFrontendOptions o;
//   o.listen = "127.0.0.1:0";
//   PKB_ASSIGN_OR_RETURN(auto web, HttpFrontend::Start(o, store, catalog));
//   int port = web->port();   // ~HttpFrontend stops it
//
// Endpoints (query parameters in docs/leaderboard.md):
//   GET /api/v1/problems                   the catalog (pkb.v1.ProblemCatalog)
//   GET /api/v1/leaderboard?problem=&...   pkb.v1.LeaderboardAnswer; format=csv for CSV
//   GET /api/v1/suite?world_size=&p=...    pkb.v1.SuiteAnswer; format=csv
//   GET /api/v1/submissions/<job id>       the public view of pkb.v1.Submission; format=csv
//   GET /healthz                           "ok"
//   GET /, /app.js, /style.css             the pages
//
// Thread-safe; requests run on a small pool of its own threads (HttpServerLimits::threads).
#ifndef PKB_SERVER_HTTP_FRONTEND_H_
#define PKB_SERVER_HTTP_FRONTEND_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "pkb/v1/leaderboard.pb.h"
#include "server/http_connections.h"
#include "server/job_store.h"
#include "server/problem_catalog.h"

namespace httplib {
class Server;
}

namespace pkb {

struct HttpFrontendOptions {
  std::string listen = "127.0.0.1:7312";  // host:port; port 0 picks a free one
  std::string web_root;  // serve the pages from this folder instead of the built-in copies
  HttpServerLimits limits;
  std::string tls_cert;  // PEM files; both set: HTTPS only
  std::string tls_key;
};

class HttpFrontend {
 public:
  // `store` and `catalog` must outlive the frontend.
  static absl::StatusOr<std::unique_ptr<HttpFrontend>> Start(HttpFrontendOptions options,
                                                             JobStore* store,
                                                             const ProblemCatalogIndex* catalog);
  ~HttpFrontend();
  int port() const { return port_; }
  void Stop();

 private:
  HttpFrontend() = default;
  void Route();

  HttpFrontendOptions options_;
  JobStore* store_ = nullptr;
  const ProblemCatalogIndex* catalog_ = nullptr;
  std::unique_ptr<httplib::Server> server_;
  std::unique_ptr<HttpConnections> connections_;
  std::thread thread_;
  int port_ = 0;
};

// A static page compiled into the binary (web_assets.cc, generated from server/web/).
struct WebAsset {
  const char* path;          // "/app.js"
  const char* content_type;  // "text/html", served as UTF-8
  const char* body;
};
extern const WebAsset kWebAssets[];
extern const int kWebAssetCount;

}  // namespace pkb

#endif  // PKB_SERVER_HTTP_FRONTEND_H_
