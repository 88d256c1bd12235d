// Opens a socket to send its inputs (or fetch answers) over the network.
// Verdict: REJECTED by the static check [network]; the sandbox has no network anyway.
#include <pkb/candidate.h>
#include <sys/socket.h>
#include <netinet/in.h>
PKB_CANDIDATE_API_V1;
extern "C" int pkb_run(pkb_context*, const pkb_tensor* in, int, const pkb_scalar*, int,
                       pkb_tensor*, int) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(50051);
  connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  return int(in[0].shape[0] * 0);
}
