// Keeps every answer it computes, keyed by the contents of its input, and replays the answer
// (a copy, no collective) whenever it meets contents it has seen before; its honest path is
// slow on purpose (3 ms). If the timed iterations met contents from the warm-up or from earlier
// timed iterations, it would be timed at the cost of a copy with correct outputs, which no
// output check can catch. The harness gives every timed iteration an input set of its own and
// the warm-up a set of its own, so it never hits: verdict OK, timed at >= 3 ms per call.
#include <time.h>

#include <map>
#include <string>
#include <vector>

#include "common.h"
PKB_CANDIDATE_API_V1;
static std::map<std::string, std::vector<uint16_t>> answers;
extern "C" int pkb_run(pkb_context* ctx, const pkb_tensor* in, int, const pkb_scalar*, int,
                       pkb_tensor* out, int) {
  const int64_t n = pkb_numel(&in[0]);
  const auto* x = static_cast<const uint16_t*>(in[0].data);
  auto* o = static_cast<uint16_t*>(out[0].data);
  const std::string key(reinterpret_cast<const char*>(x), n * sizeof(uint16_t));
  auto hit = answers.find(key);
  // Every rank must take part in the all-reduce, so the ranks agree on replaying.
  int miss = hit == answers.end() ? 1 : 0, any_miss = 0;
  if (max_over_ranks(ctx, miss, &any_miss) != 0) return 1;
  if (!any_miss) {
    std::copy(hit->second.begin(), hit->second.end(), o);
    return 0;
  }
  const timespec slow{0, 3 * 1000 * 1000};
  nanosleep(&slow, nullptr);
  if (allreduce_bf16(ctx, x, o, n, false) != 0) return 1;
  answers[key].assign(o, o + n);
  return 0;
}
