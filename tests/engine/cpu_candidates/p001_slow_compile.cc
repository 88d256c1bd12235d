// Problem 1 on CPU, correct, but its compile takes minutes (constant evaluation): another
// worker's compile running on the node, for tests of what runs beside a job. Its compile is
// stopped or killed by the test; were it left to run, the compile limit ends it.
#include "common.h"

namespace {
// About 5 s of g++'s constant evaluation each (within its limit of operations per evaluation).
template <unsigned long K>
constexpr unsigned long Spin() {
  unsigned long s = K;
  for (unsigned long i = 0; i < 1500; ++i)
    for (unsigned long j = 0; j < 1500; ++j) s += i ^ (s >> 3) ^ j;
  return s;
}
template <unsigned long K>
struct Slow {
  static_assert(Spin<K>() != 1, "evaluated at compile time");
  static constexpr bool kDone = Slow<K - 1>::kDone;
};
template <>
struct Slow<0> {
  static constexpr bool kDone = true;
};
static_assert(Slow<60>::kDone, "");
}  // namespace

PKB_CANDIDATE_API_V1;
extern "C" int pkb_run(pkb_context* ctx, const pkb_tensor* in, int, const pkb_scalar*, int,
                       pkb_tensor* out, int) {
  if (allreduce_bf16(ctx, static_cast<const uint16_t*>(in[0].data),
                     static_cast<uint16_t*>(out[0].data), pkb_numel(&in[0]), false) != 0)
    return 1;
  return 0;
}
