// Hazard tests of the tensor-parallel GEMM problems (see hazards.h).
#include "problems/hazards/hazards.h"

namespace pkb::hazards {
namespace {

// --- 15_combined_sharded_gemms -------------------------------------------------------------

// Rank r's output with GEMM1's result and SiLU's computed by `act` from the fp32 (or fp64)
// product, and A handed to GEMM2 in `a_type`: variants of the reference's rounding scheme.
at::Tensor Mlp15(const Case& c, int r, at::ScalarType acc, at::ScalarType a_type, bool gelu = false,
                 int block_shift = 0) {
  std::vector<at::Tensor> shards;
  for (const auto& in : c.all) shards.push_back(in[0]);
  at::Tensor x = at::cat(shards, 1).to(acc);
  const int64_t w = c.cfg.world, block = x.size(0) / w;
  const int64_t b = (r + block_shift) % w;
  at::Tensor z = at::matmul(x.narrow(0, b * block, block), c.all[r][1].to(acc));
  at::Tensor a = (gelu ? at::gelu(z) : at::silu(z)).to(a_type);
  return at::matmul(a.to(acc), c.all[r][2].to(acc)).to(c.cfg.dtype);
}

TEST_CASE("p015 fused or exact intermediates pass while GELU or a wrong block or weight fails",
          "[p015]") {
  Case c = Prepare(15, 1024, 64, 4);
  for (int r = 0; r < c.cfg.world; ++r) {
    const at::Tensor& want = c.truth[r][0];
    INFO("rank " << r);
    // Fused: fp32 GEMM1 kept in fp32 through SiLU, A rounded to bf16 for GEMM2.
    CHECK(Passes(c, 0, Mlp15(c, r, at::kFloat, at::kBFloat16), want));
    // Exact: everything in fp64, rounded once at the end.
    CHECK(Passes(c, 0, Mlp15(c, r, at::kDouble, at::kDouble), want));
    CHECK_FALSE(Passes(c, 0, Mlp15(c, r, at::kFloat, at::kBFloat16, /*gelu=*/true), want));
    CHECK_FALSE(Passes(c, 0, Mlp15(c, r, at::kFloat, at::kBFloat16, false, 1), want));
    // The next rank's W1.
    Case other = c;
    other.all[r].tensors[1] = c.all[(r + 1) % c.cfg.world][1];
    CHECK_FALSE(Passes(c, 0, Mlp15(other, r, at::kFloat, at::kBFloat16), want));
  }
}

}  // namespace
}  // namespace pkb::hazards
