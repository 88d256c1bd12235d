// Problem 85 on CPU, correct, float32 only: every rank's shard gathered through the harness's
// symmetric memory, sorted, and this rank's slice written. Its output sizes change with the input
// set (odd ranks' shards are empty when set mod 4 = 3), so the timed rounds' sets do not all have
// the same sizes. Expected verdict: OK (with --dtype float32).
#include <algorithm>

#include "common.h"
PKB_CANDIDATE_API_V1;
extern "C" int pkb_run(pkb_context* ctx, const pkb_tensor* in, int, const pkb_scalar*, int,
                       pkb_tensor* out, int) {
  if (in[0].dtype != PKB_FLOAT32) {
    ctx->set_error(ctx, "this test candidate handles float32 only");
    return 1;
  }
  const int64_t n = pkb_numel(&in[0]);
  int most = 0;
  if (max_over_ranks(ctx, static_cast<int>(n), &most) != 0) return 1;
  // Each rank's slot: its count, then its values.
  pkb_symm* s = cpu_exchange(ctx, 0, sizeof(int64_t) + size_t(most) * sizeof(float));
  if (!s) return 1;
  memcpy(s->local, &n, sizeof(n));
  memcpy(static_cast<char*>(s->local) + sizeof(n), in[0].data, size_t(n) * sizeof(float));
  if (ctx->host_barrier(ctx) != 0) return 1;
  std::vector<float> all;
  for (int p = 0; p < ctx->world_size; ++p) {
    const char* slot = static_cast<const char*>(s->peers[p]);
    int64_t count = 0;
    memcpy(&count, slot, sizeof(count));
    const float* values = reinterpret_cast<const float*>(slot + sizeof(count));
    all.insert(all.end(), values, values + count);
  }
  std::sort(all.begin(), all.end());
  const int64_t total = static_cast<int64_t>(all.size()), w = ctx->world_size, r = ctx->rank;
  const int64_t base = total / w, extra = total % w;
  const int64_t start = r * base + std::min(r, extra), size = base + (r < extra ? 1 : 0);
  if (pkb_numel(&out[0]) != size) {
    ctx->set_error(ctx, "the output's size is not this rank's slice");
    return 1;
  }
  std::copy(all.begin() + start, all.begin() + start + size, static_cast<float*>(out[0].data));
  // Nobody overwrites its slot before every rank has read it.
  return ctx->host_barrier(ctx);
}
