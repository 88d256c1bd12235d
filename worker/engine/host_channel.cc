#include "worker/engine/host_channel.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace pkb {
namespace {

absl::Status Errno(const char* what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

}  // namespace

HostChannel::~HostChannel() {
  if (fd_ >= 0) close(fd_);
}

absl::Status HostChannel::Send(const google::protobuf::MessageLite& message, int pass_fd) {
  std::string body;
  if (!message.SerializeToString(&body)) return absl::InternalError("cannot serialize a message");
  std::string frame(4, '\0');
  const uint32_t n = static_cast<uint32_t>(body.size());
  std::memcpy(frame.data(), &n, 4);
  frame += body;
  size_t sent = 0;
  while (sent < frame.size()) {
    iovec iov{frame.data() + sent, frame.size() - sent};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    if (sent == 0 && pass_fd >= 0) {
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
    }
    ssize_t k = sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return Errno("send");
    sent += static_cast<size_t>(k);
  }
  return absl::OkStatus();
}

absl::Status HostChannel::Receive(google::protobuf::MessageLite* message, int* received_fd,
                                  size_t max_bytes) {
  if (received_fd) *received_fd = -1;
  char header[4];
  size_t got = 0;
  while (got < sizeof header) {
    iovec iov{header + got, sizeof header - got};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t k = recvmsg(fd_, &msg, MSG_CMSG_CLOEXEC);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return Errno("receive");
    if (k == 0) return absl::UnavailableError("the peer closed the channel");
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      int fd;
      std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
      if (received_fd && *received_fd < 0) {
        *received_fd = fd;
      } else {
        close(fd);
      }
    }
    got += static_cast<size_t>(k);
  }
  uint32_t n;
  std::memcpy(&n, header, 4);
  if (n > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a message of ", n, " bytes (at most ", max_bytes, ")"));
  }
  std::string body(n, '\0');
  got = 0;
  while (got < n) {
    ssize_t k = read(fd_, body.data() + got, n - got);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return Errno("receive");
    if (k == 0) return absl::UnavailableError("the peer closed the channel mid-message");
    got += static_cast<size_t>(k);
  }
  if (!message->ParseFromString(body))
    return absl::InvalidArgumentError("a message does not parse");
  return absl::OkStatus();
}

}  // namespace pkb
