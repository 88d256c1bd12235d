// One end of the socket between a rank's harness (the judge) and its candidate host: protobuf
// messages (rank_host.proto), each behind a 4-byte length, with at most one file descriptor
// passed beside a message (SCM_RIGHTS). No libtorch.
//
//   HostChannel ch(fd);                      // takes ownership of a connected stream socket
//   ch.Send(request, memfd);                 // memfd travels with the message; -1 for none
//   v1::HostReply reply;
//   absl::Status st = ch.Receive(&reply);    // UNAVAILABLE once the peer has gone
#ifndef PKB_WORKER_ENGINE_HOST_CHANNEL_H_
#define PKB_WORKER_ENGINE_HOST_CHANNEL_H_

#include <cstddef>

#include "absl/status/status.h"
#include "google/protobuf/message_lite.h"

namespace pkb {

class HostChannel {
 public:
  explicit HostChannel(int fd) : fd_(fd) {}
  ~HostChannel();
  HostChannel(const HostChannel&) = delete;
  HostChannel& operator=(const HostChannel&) = delete;

  absl::Status Send(const google::protobuf::MessageLite& message, int pass_fd = -1);
  // Blocks for a whole message. A message longer than `max_bytes` (what the peer could make us
  // allocate) or one that does not parse is an error; so is a descriptor when `received_fd` is
  // null (it is closed).
  absl::Status Receive(google::protobuf::MessageLite* message, int* received_fd = nullptr,
                       size_t max_bytes = size_t{64} << 20);

 private:
  int fd_;
};

}  // namespace pkb

#endif  // PKB_WORKER_ENGINE_HOST_CHANNEL_H_
