// The web leaderboard's open connections, kept so that no client can hold the server: one thread
// waits on every connection (epoll) and reads each request's head itself, under deadlines and size
// limits; only a complete head goes to the small pool of threads that run handlers. An idle
// keep-alive connection or a slow client ("slowloris") costs a file descriptor, not a thread, and
// is dropped at its deadline; an over-long request line or head is refused as soon as the limit
// is passed, without reading the rest.
//
// cpp-httplib 0.11 (Debian's) runs one connection per pool thread and has only per-read timeouts,
// which a client sending a byte a second never trips. The server subclass in http_frontend.cc
// hands each accepted socket to Adopt() instead, and a complete request back to httplib's own
// request processing through `Handler`.
//
//   HttpConnections conns(limits, /*tls=*/nullptr,
//                         [&](httplib::Stream& s, bool last, bool* closed) {
//                           return server.ProcessRequest(s, last, closed);
//                         });
//   PKB_RETURN_IF_ERROR(conns.Start());
//   conns.Adopt(fd);  // from the accept loop; conns owns fd from here
//   conns.Stop();     // or ~HttpConnections
//
// Thread-safe: Adopt() may be called from any thread.
#ifndef PKB_SERVER_HTTP_CONNECTIONS_H_
#define PKB_SERVER_HTTP_CONNECTIONS_H_

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace httplib {
class Stream;
class ThreadPool;
}  // namespace httplib
typedef struct ssl_ctx_st SSL_CTX;

namespace pkb {

// Limits of the web leaderboard's server (pkb-coordinator's --http-* flags, docs/operations.md).
struct HttpServerLimits {
  int threads = 8;             // run handlers; waiting connections hold none
  int max_connections = 1024;  // open at once; more are closed at accept
  // A connection with no request in flight (new, or kept alive after one) is closed after this.
  // For TLS it includes the handshake.
  absl::Duration idle_timeout = absl::Seconds(5);
  // From a request's first byte to its last: a client slower than this gets 408 and is closed.
  absl::Duration request_timeout = absl::Seconds(5);
  // Writing one response; a client that does not read it is closed.
  absl::Duration write_timeout = absl::Seconds(10);
  int max_requests_per_connection = 100;
  size_t max_request_line = 8192;   // longer: 414 at once (httplib's own limit is the same)
  size_t max_request_head = 16384;  // request line and headers; longer: 431 at once
};

class HttpConnection;

class HttpConnections {
 public:
  // Runs one request whose head is buffered in `stream`; `last`: answer with Connection: close.
  // Returns false, or sets *closed, when the connection must not serve another request.
  using Handler = std::function<bool(httplib::Stream& stream, bool last, bool* closed)>;

  // `tls` (may be null: plain HTTP) must outlive this; each connection gets an SSL of its own.
  HttpConnections(HttpServerLimits limits, SSL_CTX* tls, Handler handler);
  ~HttpConnections();
  HttpConnections(const HttpConnections&) = delete;
  HttpConnections& operator=(const HttpConnections&) = delete;

  absl::Status Start();
  // Takes ownership of a connected socket.
  void Adopt(int fd);
  // Closes every connection; waits for handlers in flight (each bounded by the write timeout).
  void Stop();

  // Connections open now (waiting, being read or in a handler).
  int open() const { return open_.load(); }

 private:
  void Loop();
  void TakeIncoming();
  void Pump(HttpConnection* c);
  void Refuse(HttpConnection* c, int code);
  void Dispatch(HttpConnection* c);
  void Serve(HttpConnection* c);
  void Watch(HttpConnection* c, bool want_write);
  void Close(HttpConnection* c);  // one the loop holds
  void ExpireDeadlines();
  void Wake();

  const HttpServerLimits limits_;
  SSL_CTX* const tls_;
  const Handler handler_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::thread loop_;
  std::unique_ptr<httplib::ThreadPool> pool_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> open_{0};

  absl::Mutex mu_;
  // New sockets and connections back from a handler, for the loop to watch.
  std::vector<std::unique_ptr<HttpConnection>> incoming_ ABSL_GUARDED_BY(mu_);
  // Owned by the loop thread: the connections it watches (epoll's data.ptr points at the key).
  std::unordered_map<HttpConnection*, std::unique_ptr<HttpConnection>> watched_;
};

}  // namespace pkb

#endif  // PKB_SERVER_HTTP_CONNECTIONS_H_
