// Honest through the verification trials, then does the work once per input buffer and nothing
// when it sees the same buffer again: the warm-up and the timed iterations cycle through the
// input sets, so all but the first pass would cost nothing. The harness poisons the outputs after
// the warm-up and after each timed use, and re-checks randomly picked timed iterations, so the
// skipped calls are caught. Verdict: MISMATCH.
#include <set>

#include "common.h"
PKB_CANDIDATE_API_V1;
static std::set<const void*> seen;
static int calls = 0;
extern "C" int pkb_run(pkb_context* ctx, const pkb_tensor* in, int, const pkb_scalar*, int,
                       pkb_tensor* out, int) {
  // Every rank must take part in the all-reduce, so the ranks agree on skipping.
  bool first = seen.insert(in[0].data).second;
  int mine = ++calls <= 5 || first ? 1 : 0, any = 0;
  if (max_over_ranks(ctx, mine, &any) != 0) return 1;
  if (!any) return 0;
  if (allreduce_bf16(ctx, static_cast<const uint16_t*>(in[0].data),
                     static_cast<uint16_t*>(out[0].data), pkb_numel(&in[0]), false) != 0)
    return 1;
  return 0;
}
