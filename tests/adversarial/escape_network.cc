// Hides socket/connect from the static check (no banned header: <net/if.h> brings the socket
// declarations along) and tries to reach a listener on the host's loopback; the corpus driver
// starts one and writes its port over @PORT@. The sandbox has its own network namespace.
// Verdict: OK (right answer when the connection failed); RUNTIME_ERROR would mean it got out.
// The driver also checks that its listener saw no connection.
#include <net/if.h>
#include <unistd.h>

#include "common.h"
#define JOIN(a, b) a##b
PKB_CANDIDATE_API_V1;
extern "C" int pkb_run(pkb_context* ctx, const pkb_tensor* in, int, const pkb_scalar*, int,
                       pkb_tensor* out, int) {
  int s = JOIN(sock, et)(AF_INET, SOCK_STREAM, 0);
  if (s >= 0) {
    sockaddr a{};
    a.sa_family = AF_INET;
    const int port = @PORT@;
    const unsigned char data[6] = {(unsigned char)(port >> 8), (unsigned char)port, 127, 0, 0, 1};
    for (int i = 0; i < 6; ++i) a.sa_data[i] = char(data[i]);
    int rc = JOIN(con, nect)(s, &a, sizeof a);
    close(s);
    if (rc == 0) {
      ctx->set_error(ctx, "connected to the host's loopback");
      return 1;
    }
  }
  if (allreduce_bf16(ctx, static_cast<const uint16_t*>(in[0].data),
                     static_cast<uint16_t*>(out[0].data), pkb_numel(&in[0]), false) != 0)
    return 1;
  return 0;
}
