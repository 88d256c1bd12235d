// Hazard tests of the blocked FP8 quantize and dequantize problems (see hazards.h).
#include "problems/hazards/hazards.h"

namespace pkb::hazards {
namespace {

// --- 19_blocked_fp8_quantize ----------------------------------------------------------------

struct Quantized {
  at::Tensor codes, scales;
};

enum class Scheme { kFp64Division, kDividedScale, kTruncate, kBf16First, kStoreSafeScale };

Quantized Quantize19(const at::Tensor& x, Scheme scheme) {
  at::Tensor blocks = x.to(at::kFloat).reshape({-1, 128});
  at::Tensor amax = blocks.abs().amax(1, true);
  // PKB's scale multiplies by the rounded reciprocal; an IEEE division by 448 is the mistake.
  at::Tensor s = scheme == Scheme::kDividedScale ? (amax.to(at::kDouble) / 448.0).to(at::kFloat)
                                                 : amax * at::full_like(amax, 1.0f / 448.0f);
  at::Tensor safe = at::where(s.eq(0), at::ones_like(s), s);
  at::Tensor q = (blocks.to(at::kDouble) / safe.to(at::kDouble)).to(at::kFloat);
  if (scheme == Scheme::kBf16First) q = q.to(at::kBFloat16).to(at::kFloat);
  at::Tensor codes;
  if (scheme == Scheme::kTruncate) {
    // Round toward zero: the largest E4M3 value not above |q|, with q's sign.
    at::Tensor near = q.to(at::kFloat8_e4m3fn);
    at::Tensor back = near.to(at::kFloat);
    at::Tensor over = back.abs().gt(q.abs());
    at::Tensor bits = near.view(at::kByte).to(at::kInt);
    codes = at::where(over, bits - 1, bits).to(at::kByte).view(at::kFloat8_e4m3fn);
  } else {
    codes = q.to(at::kFloat8_e4m3fn);
  }
  return {codes.reshape(x.sizes()).contiguous(),
          (scheme == Scheme::kStoreSafeScale ? safe : s).reshape({x.size(0), -1}).contiguous()};
}

Quantized Gathered19(const Case& c, Scheme scheme) {
  std::vector<at::Tensor> codes, scales;
  for (const auto& in : c.all) {
    Quantized q = Quantize19(in[0], scheme);
    codes.push_back(q.codes.view(at::kByte));
    scales.push_back(q.scales);
  }
  return {at::cat(codes, 0).view(at::kFloat8_e4m3fn), at::cat(scales, 0)};
}

TEST_CASE(
    "p019 codes and scales are exact and a divided scale or truncation or double rounding fail",
    "[p019]") {
  Case c = Prepare(19, 64, 256, 2);
  const at::Tensor& codes = c.truth[0][0];
  const at::Tensor& scales = c.truth[0][1];

  // The quotient in fp64 rounded once to fp32 is the correctly rounded fp32 quotient.
  Quantized exact = Gathered19(c, Scheme::kFp64Division);
  CHECK(Same(exact.codes, codes));
  CHECK(Same(exact.scales, scales));
  CHECK(Passes(c, 0, exact.codes, codes));
  CHECK(Passes(c, 1, exact.scales, scales));

  Quantized divided = Gathered19(c, Scheme::kDividedScale);
  REQUIRE_FALSE(Same(divided.scales, scales));
  CHECK_FALSE(Passes(c, 1, divided.scales, scales));

  Quantized trunc = Gathered19(c, Scheme::kTruncate);
  REQUIRE_FALSE(Same(trunc.codes, codes));
  CHECK_FALSE(Passes(c, 0, trunc.codes, codes));

  Quantized bf16 = Gathered19(c, Scheme::kBf16First);
  REQUIRE_FALSE(Same(bf16.codes, codes));
  CHECK_FALSE(Passes(c, 0, bf16.codes, codes));

  // One code one E4M3 step off (the smallest possible error) fails.
  at::Tensor one_off = codes.view(at::kByte).clone();
  one_off[3][5].fill_(one_off[3][5].item<uint8_t>() ^ 1);
  CHECK_FALSE(Passes(c, 0, one_off.view(at::kFloat8_e4m3fn), codes));
}

TEST_CASE("p019 an all-zero block stores scale 0 and codes 0", "[p019]") {
  Case c = Prepare(19, 4, 256, 1);
  c.all[0].tensors[0][1].narrow(0, 128, 128).zero_();
  auto o = c.p->Oracle(c.all, c.cfg);
  REQUIRE(o.ok());
  const at::Tensor& scales = (*o)[0][1];
  CHECK(scales[1][1].item<float>() == 0.0f);
  CHECK(at::equal((*o)[0][0].view(at::kByte)[1].narrow(0, 128, 128), at::zeros({128}, at::kByte)));
  Quantized safe = Gathered19(c, Scheme::kStoreSafeScale);
  CHECK_FALSE(Passes(c, 1, safe.scales, scales));
}

// --- 20_blocked_fp8_dequantize --------------------------------------------------------------

// Rank r's output when every chunk is dequantized by `dq`.
template <typename F>
at::Tensor Dequant20(const Case& c, int r, F dq) {
  std::vector<at::Tensor> chunks;
  for (const auto& in : c.all) chunks.push_back(dq(in[0][r], in[1][r]));
  return at::stack(chunks, 0);
}

TEST_CASE("p020 fp32 products are exact and dtype rounding or a shifted scale fails", "[p020]") {
  Case c = Prepare(20, 64, 64, 4);
  for (int r = 0; r < c.cfg.world; ++r) {
    const at::Tensor& want = c.truth[r][0];
    INFO("rank " << r);
    auto fp32 = [](const at::Tensor& y, const at::Tensor& s) {
      return (y.to(at::kFloat).reshape({-1, 128}) * s.to(at::kFloat).reshape({-1, 1}))
          .reshape(y.sizes());
    };
    CHECK(Same(Dequant20(c, r, fp32), want));
    auto rounded = [](const at::Tensor& y, const at::Tensor& s) {
      return (y.reshape({-1, 128}) * s.reshape({-1, 1})).reshape(y.sizes()).to(at::kFloat);
    };
    CHECK_FALSE(Passes(c, 0, Dequant20(c, r, rounded).contiguous(), want));
    // Off by one block: each block scaled by its neighbour's scale.
    auto shifted = [&](const at::Tensor& y, const at::Tensor& s) {
      return fp32(y, at::roll(s, 1));
    };
    CHECK_FALSE(Passes(c, 0, Dequant20(c, r, shifted).contiguous(), want));
  }
}

}  // namespace
}  // namespace pkb::hazards
