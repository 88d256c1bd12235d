// Starts a helper process that outlives the candidate host: pkb_init forks (hidden from the static
// check by token pasting), the child moves to a session of its own and forks again, and the
// grandchild spins on the CPU for a minute, long after the host is killed, to slow the judge's
// timing of the reference. The judge is a child subreaper: the orphan comes back to it, is killed
// before the reference is timed, and the verdict says so. Verdict: REJECTED.
#include <unistd.h>

#include <ctime>

#include "common.h"
#define JOIN(a, b) a##b
PKB_CANDIDATE_API_V1;

extern "C" int pkb_init(pkb_context*) {
  pid_t child = JOIN(fo, rk)();
  if (child == 0) {
    JOIN(set, sid)();
    if (JOIN(fo, rk)() != 0) _exit(0);  // the helper is now an orphan
    const time_t end = time(nullptr) + 60;
    volatile unsigned long spin = 0;
    while (time(nullptr) < end) ++spin;
    _exit(0);
  }
  return 0;
}

extern "C" int pkb_run(pkb_context* ctx, const pkb_tensor* in, int, const pkb_scalar*, int,
                       pkb_tensor* out, int) {
  return allreduce_bf16(ctx, static_cast<const uint16_t*>(in[0].data),
                        static_cast<uint16_t*>(out[0].data), pkb_numel(&in[0]), false);
}
