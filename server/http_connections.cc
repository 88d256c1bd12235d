#include "server/http_connections.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace pkb {
namespace {

using Clock = std::chrono::steady_clock;

// How long a refused connection may keep sending before it is closed: closing a socket with
// unread input resets it, and the client may then never see the refusal.
constexpr auto kDrainTime = std::chrono::milliseconds(500);
// What the loop reads of a refused connection per wake-up, so that a client sending without end
// cannot keep it from the others.
constexpr int kDrainReads = 8;
// How often the loop looks for connections past their deadline.
constexpr auto kDeadlineScan = std::chrono::milliseconds(50);

Clock::duration ToClock(absl::Duration d) {
  return std::chrono::duration_cast<Clock::duration>(absl::ToChronoNanoseconds(d));
}

enum class Io { kOk, kWantRead, kWantWrite, kEof, kError };

Io SslIo(SSL* ssl, int ret) {
  switch (SSL_get_error(ssl, ret)) {
    case SSL_ERROR_WANT_READ:
      return Io::kWantRead;
    case SSL_ERROR_WANT_WRITE:
      return Io::kWantWrite;
    case SSL_ERROR_ZERO_RETURN:
      return Io::kEof;
    default:
      return Io::kError;
  }
}

// Waits until `fd` is ready for `io` or `deadline` passes; false on the deadline.
bool WaitFor(int fd, Io io, Clock::time_point deadline) {
  for (;;) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, static_cast<short>(io == Io::kWantWrite ? POLLOUT : POLLIN), 0};
    int r = poll(&p, 1, static_cast<int>(std::min<int64_t>(left, INT_MAX)));
    if (r > 0) return true;  // ready, or an error the next read or write reports
    if (r < 0 && errno != EINTR) return false;
  }
}

void Address(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  int r = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len)
               : getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  if (r != 0) return;
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof host, serv, sizeof serv,
                  NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
    ip = host;
    port = atoi(serv);
  }
}

const char* Reason(int code) {
  switch (code) {
    case 408:
      return "Request Timeout";
    case 414:
      return "URI Too Long";
    case 431:
      return "Request Header Fields Too Large";
    default:
      return "Bad Request";
  }
}

}  // namespace

// One client connection: its socket (non-blocking), its TLS state, and the bytes read of the
// request(s) not yet handled.
class HttpConnection {
 public:
  HttpConnection(int fd, SSL* ssl) : fd_(fd), ssl_(ssl) {}
  ~HttpConnection() {
    if (ssl_) {
      if (SSL_is_init_finished(ssl_)) SSL_shutdown(ssl_);
      SSL_free(ssl_);
    }
    close(fd_);
  }

  int fd() const { return fd_; }
  bool buffered() const { return in_off < in.size() || (ssl_ && SSL_pending(ssl_) > 0); }

  Io Read(char* buf, size_t size, size_t* n) {
    if (ssl_) {
      ERR_clear_error();
      int r = SSL_read(ssl_, buf, static_cast<int>(std::min<size_t>(size, INT_MAX)));
      if (r > 0) {
        *n = static_cast<size_t>(r);
        return Io::kOk;
      }
      return SslIo(ssl_, r);
    }
    for (;;) {
      ssize_t r = recv(fd_, buf, size, 0);
      if (r > 0) {
        *n = static_cast<size_t>(r);
        return Io::kOk;
      }
      if (r == 0) return Io::kEof;
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK ? Io::kWantRead : Io::kError;
    }
  }

  Io Write(const char* buf, size_t size, size_t* n) {
    if (ssl_) {
      ERR_clear_error();
      int r = SSL_write(ssl_, buf, static_cast<int>(std::min<size_t>(size, INT_MAX)));
      if (r > 0) {
        *n = static_cast<size_t>(r);
        return Io::kOk;
      }
      return SslIo(ssl_, r);
    }
    for (;;) {
      ssize_t r = send(fd_, buf, size, MSG_NOSIGNAL);
      if (r >= 0) {
        *n = static_cast<size_t>(r);
        return Io::kOk;
      }
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK ? Io::kWantWrite : Io::kError;
    }
  }

  // After a refusal: no more output, so the client sees the end of the answer.
  void ShutdownWrites() {
    if (ssl_) {
      if (SSL_is_init_finished(ssl_)) SSL_shutdown(ssl_);
    } else {
      shutdown(fd_, SHUT_WR);
    }
  }

  std::string in;      // bytes read and not yet handled
  size_t in_off = 0;   // of which a handler has consumed this many
  size_t scanned = 0;  // of which the head scan has looked at this many
  Clock::time_point deadline;
  bool in_request = false;  // a request's first byte has arrived
  bool draining = false;    // refused: reading and dropping until the client closes
  int served = 0;
  uint32_t watching = 0;  // epoll events asked for; 0: not in the epoll set

 private:
  const int fd_;
  SSL* const ssl_;
};

namespace {

enum class Head { kIncomplete, kComplete, kLineTooLong, kTooLarge };

Head ScanHead(HttpConnection* c, const HttpServerLimits& limits) {
  const std::string& in = c->in;
  size_t line_end = in.find('\n');
  if (line_end == std::string::npos ? in.size() > limits.max_request_line
                                    : line_end + 1 > limits.max_request_line)
    return Head::kLineTooLong;
  size_t end = in.find("\r\n\r\n", c->scanned > 3 ? c->scanned - 3 : 0);
  c->scanned = in.size();
  if (end != std::string::npos)
    return end + 4 > limits.max_request_head ? Head::kTooLarge : Head::kComplete;
  return in.size() > limits.max_request_head ? Head::kTooLarge : Head::kIncomplete;
}

// httplib's view of a connection while a handler runs: the buffered head first, then the socket,
// every wait bounded by the request's deadline (reads) or the write timeout (the response).
class ConnectionStream : public httplib::Stream {
 public:
  ConnectionStream(HttpConnection* c, Clock::time_point read_deadline,
                   Clock::duration write_timeout)
      : c_(c), read_deadline_(read_deadline), write_timeout_(write_timeout) {}

  bool is_readable() const override {
    return c_->buffered() || WaitFor(c_->fd(), Io::kWantRead, read_deadline_);
  }
  bool is_writable() const override { return WaitFor(c_->fd(), Io::kWantWrite, WriteDeadline()); }

  ssize_t read(char* ptr, size_t size) override {
    if (c_->in_off < c_->in.size()) {
      size_t n = std::min(size, c_->in.size() - c_->in_off);
      memcpy(ptr, c_->in.data() + c_->in_off, n);
      c_->in_off += n;
      return static_cast<ssize_t>(n);
    }
    for (;;) {
      size_t n = 0;
      Io io = c_->Read(ptr, size, &n);
      if (io == Io::kOk) return static_cast<ssize_t>(n);
      if (io == Io::kEof) return 0;
      if (io == Io::kError || !WaitFor(c_->fd(), io, read_deadline_)) return -1;
    }
  }

  ssize_t write(const char* ptr, size_t size) override {
    for (;;) {
      size_t n = 0;
      Io io = c_->Write(ptr, size, &n);
      if (io == Io::kOk) return static_cast<ssize_t>(n);
      if (io == Io::kEof || io == Io::kError || !WaitFor(c_->fd(), io, WriteDeadline())) return -1;
    }
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    Address(c_->fd(), true, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    Address(c_->fd(), false, ip, port);
  }
  socket_t socket() const override { return c_->fd(); }

 private:
  // The write timeout runs from the response's first byte, not while the handler computes it.
  Clock::time_point WriteDeadline() const {
    if (!write_deadline_) write_deadline_ = Clock::now() + write_timeout_;
    return *write_deadline_;
  }

  HttpConnection* const c_;
  const Clock::time_point read_deadline_;
  const Clock::duration write_timeout_;
  mutable std::optional<Clock::time_point> write_deadline_;
};

}  // namespace

HttpConnections::HttpConnections(HttpServerLimits limits, SSL_CTX* tls, Handler handler)
    : limits_(limits), tls_(tls), handler_(std::move(handler)) {}

HttpConnections::~HttpConnections() { Stop(); }

absl::Status HttpConnections::Start() {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0)
    return absl::InternalError(absl::StrCat("web leaderboard: epoll: ", strerror(errno)));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;  // the wake-up
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev) != 0)
    return absl::InternalError(absl::StrCat("web leaderboard: epoll_ctl: ", strerror(errno)));
  pool_ = std::make_unique<httplib::ThreadPool>(static_cast<size_t>(std::max(1, limits_.threads)));
  loop_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void HttpConnections::Adopt(int fd) {
  if (stopping_ || open_.load() >= limits_.max_connections) {
    close(fd);
    return;
  }
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    close(fd);
    return;
  }
  SSL* ssl = nullptr;
  if (tls_) {
    ssl = SSL_new(tls_);
    if (!ssl || SSL_set_fd(ssl, fd) != 1) {
      if (ssl) SSL_free(ssl);
      close(fd);
      return;
    }
    SSL_set_accept_state(ssl);
    SSL_set_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  }
  auto c = std::make_unique<HttpConnection>(fd, ssl);
  c->deadline = Clock::now() + ToClock(limits_.idle_timeout);
  ++open_;
  {
    absl::MutexLock lock(&mu_);
    incoming_.push_back(std::move(c));
  }
  Wake();
}

void HttpConnections::Wake() {
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
}

void HttpConnections::Loop() {
  epoll_event events[64];
  Clock::time_point last_scan = Clock::now();
  while (!stopping_) {
    int n = epoll_wait(epoll_fd_, events, 64,
                       static_cast<int>(std::chrono::milliseconds(kDeadlineScan).count()));
    for (int i = 0; i < n; ++i) {
      if (events[i].data.ptr == nullptr) {
        uint64_t count;
        (void)!read(wake_fd_, &count, sizeof count);
        TakeIncoming();
      } else {
        Pump(static_cast<HttpConnection*>(events[i].data.ptr));
      }
    }
    if (Clock::now() - last_scan >= kDeadlineScan) {
      ExpireDeadlines();
      last_scan = Clock::now();
    }
  }
  open_ -= static_cast<int>(watched_.size());
  watched_.clear();
}

void HttpConnections::TakeIncoming() {
  std::vector<std::unique_ptr<HttpConnection>> taken;
  {
    absl::MutexLock lock(&mu_);
    taken.swap(incoming_);
  }
  for (auto& c : taken) {
    HttpConnection* raw = c.get();
    watched_.emplace(raw, std::move(c));
    Pump(raw);  // bytes may be there already (a pipelined request, TLS records)
  }
}

void HttpConnections::Watch(HttpConnection* c, bool want_write) {
  uint32_t events = want_write ? EPOLLOUT : EPOLLIN;
  if (c->watching == events) return;
  epoll_event ev{};
  ev.events = events;
  ev.data.ptr = c;
  if (epoll_ctl(epoll_fd_, c->watching ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c->fd(), &ev) != 0) {
    spdlog::warn("web leaderboard: epoll_ctl: {}", strerror(errno));
    Close(c);
    return;
  }
  c->watching = events;
}

void HttpConnections::Close(HttpConnection* c) {
  if (c->watching) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd(), nullptr);
  watched_.erase(c);
  --open_;
}

void HttpConnections::Pump(HttpConnection* c) {
  char buf[8192];
  for (int reads = 0;; ++reads) {
    if (c->draining && reads == kDrainReads) return;  // still watched: more at the next wake-up
    if (!c->draining && c->in.size() > c->in_off) {
      if (!c->in_request) {
        c->in_request = true;
        c->deadline = Clock::now() + ToClock(limits_.request_timeout);
      }
      switch (ScanHead(c, limits_)) {
        case Head::kComplete:
          return Dispatch(c);
        case Head::kLineTooLong:
          return Refuse(c, 414);
        case Head::kTooLarge:
          return Refuse(c, 431);
        case Head::kIncomplete:
          break;
      }
    }
    size_t n = 0;
    Io io = c->Read(buf, sizeof buf, &n);
    if (io == Io::kOk) {
      if (!c->draining) c->in.append(buf, n);
      continue;
    }
    if (io == Io::kWantRead || io == Io::kWantWrite) return Watch(c, io == Io::kWantWrite);
    return Close(c);
  }
}

void HttpConnections::Refuse(HttpConnection* c, int code) {
  const std::string body = absl::StrCat("{\"error\":\"HTTP ", code, "\"}");
  const std::string answer = absl::StrCat(
      "HTTP/1.1 ", code, " ", Reason(code),
      "\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ", body.size(),
      "\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\n", body);
  // One try: nothing else is queued on the socket, so its buffer takes this much.
  size_t n = 0;
  (void)c->Write(answer.data(), answer.size(), &n);
  c->ShutdownWrites();
  c->draining = true;
  c->in.clear();
  c->in_off = 0;
  c->deadline = Clock::now() + kDrainTime;
  Watch(c, false);
}

void HttpConnections::Dispatch(HttpConnection* c) {
  if (c->watching) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd(), nullptr);
  c->watching = 0;
  auto it = watched_.find(c);
  HttpConnection* raw = it->second.release();
  watched_.erase(it);
  pool_->enqueue([this, raw] { Serve(raw); });
}

void HttpConnections::Serve(HttpConnection* raw) {
  std::unique_ptr<HttpConnection> c(raw);
  const bool last = ++c->served >= limits_.max_requests_per_connection || stopping_;
  bool closed = false;
  bool ok;
  {
    ConnectionStream stream(c.get(), c->deadline, ToClock(limits_.write_timeout));
    ok = handler_(stream, last, &closed);
  }
  if (!ok || closed || last || stopping_) {
    --open_;
    return;
  }
  c->in.erase(0, c->in_off);
  c->in_off = 0;
  c->scanned = 0;
  c->in_request = false;
  c->deadline = Clock::now() + ToClock(limits_.idle_timeout);
  {
    absl::MutexLock lock(&mu_);
    incoming_.push_back(std::move(c));
  }
  Wake();
}

void HttpConnections::ExpireDeadlines() {
  const Clock::time_point now = Clock::now();
  std::vector<HttpConnection*> expired;
  for (auto& [raw, c] : watched_) {
    if (c->deadline <= now) expired.push_back(raw);
  }
  for (HttpConnection* c : expired) {
    if (c->in_request && !c->draining) {
      Refuse(c, 408);
    } else {
      Close(c);
    }
  }
}

void HttpConnections::Stop() {
  if (stopping_.exchange(true)) return;
  if (loop_.joinable()) {
    Wake();
    loop_.join();
  }
  if (pool_) pool_->shutdown();  // handlers in flight end within their deadlines
  {
    absl::MutexLock lock(&mu_);
    open_ -= static_cast<int>(incoming_.size());
    incoming_.clear();
  }
  if (wake_fd_ >= 0) close(wake_fd_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
  wake_fd_ = epoll_fd_ = -1;
}

}  // namespace pkb
