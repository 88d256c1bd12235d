// A helper thread of the submission that would work while the judge is between requests: for
// instance read a round's inputs as they land, before its timed window, and work answers out off
// the clock. The candidate host is stopped (SIGSTOP) from each answer to the next request, so
// the thread never runs then. This entry counts its process's continuations (SIGCONT, through a
// handler hidden from the static check by token pasting): its first 5 calls are the 5 trials,
// each a request of its own after pkb_init's, so the k-th must come after at least k
// continuations; it fails its calls otherwise. Verdict: OK.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>

#include "common.h"
#define JOIN(a, b) a##b
PKB_CANDIDATE_API_V1;

namespace {
std::atomic<int> continued{0};
int calls = 0;
std::atomic<long> laps{0};
void OnContinue(int) { continued.fetch_add(1); }
void* Helper(void*) {
  for (;;) {
    laps.fetch_add(1);  // where the work would be
    usleep(200);
  }
  return nullptr;
}
}  // namespace

extern "C" int pkb_init(pkb_context*) {
  struct sigaction sa = {};
  sa.sa_handler = OnContinue;
  if (JOIN(sig, action)(SIGCONT, &sa, nullptr) != 0) return 1;
  pthread_t helper;
  return pthread_create(&helper, nullptr, Helper, nullptr) == 0 ? 0 : 1;
}

extern "C" int pkb_run(pkb_context* ctx, const pkb_tensor* in, int, const pkb_scalar*, int,
                       pkb_tensor* out, int) {
  ++calls;
  if (continued.load() < (calls < 5 ? calls : 5)) {
    ctx->set_error(ctx, "this process was not stopped between two of the judge's requests");
    return 1;
  }
  return allreduce_bf16(ctx, static_cast<const uint16_t*>(in[0].data),
                        static_cast<uint16_t*>(out[0].data), pkb_numel(&in[0]), false);
}
