// Problem 13, DOES NOT COMPILE on purpose (a test fixture): at::Tensor passed where a raw
// pointer is expected. COMPILE_ERROR expected.
#include "pkb/aten.h"
#include "pkb/candidate.h"

PKB_CANDIDATE_API_V1;

extern "C" int pkb_run(pkb_context* ctx, const pkb_tensor* in, int, const pkb_scalar*, int,
                       pkb_tensor* out, int) {
  auto guard = pkb::use_stream(ctx);
  at::Tensor c = at::matmul(pkb::as_tensor(in[0]), pkb::as_tensor(in[1]));
  cudaMemcpyAsync(out[0].data, c, c.nbytes(), cudaMemcpyDeviceToDevice);
  return 0;
}
