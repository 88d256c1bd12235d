// Each problem's numerics hazards, checked against its oracle with the candidate tolerance:
// plausible correct alternatives (another rounding or accumulation scheme) must pass, plausible
// mistakes must fail. problem_cpu_check covers the generic wrong answers (zeros, noise, echoed
// inputs, a rank missing); this file covers what is particular to one problem. No MPI: the
// oracle holds every rank's inputs.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "problems/ep/moe_pipeline.h"
#include "problems/harness/check.h"
#include "problems/harness/inputs.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

struct Case {
  const Problem* p;
  RunConfig cfg;
  std::vector<Inputs> all;
  std::vector<std::vector<at::Tensor>> truth;  // per rank, the oracle's outputs
};

Case Prepare(int id, int64_t m, int64_t n, int world, int set = 0) {
  auto p = FindProblem(id);
  REQUIRE(p.ok());
  Case c;
  c.p = *p;
  c.cfg.m = m;
  c.cfg.n = n;
  c.cfg.world = world;
  REQUIRE(CheckRunnable(*c.p, c.cfg).ok());
  c.all = DrawAllInputs(*c.p, c.cfg, set);
  auto o = c.p->Oracle(c.all, c.cfg);
  REQUIRE(o.ok());
  c.truth = std::move(*o);
  return c;
}

bool Passes(const Case& c, int index, const at::Tensor& got, const at::Tensor& want) {
  return CompareOutput(got, want, c.p->GetTolerance(c.cfg, index)).ok();
}

bool Same(const at::Tensor& a, const at::Tensor& b) {
  return at::equal(a.contiguous().view(at::kByte), b.contiguous().view(at::kByte));
}

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

// --- 30_moe_epgroupgemm_lora_backward -------------------------------------------------------

TEST_CASE("p030 any summation order passes at W = 8 and a mean instead of a sum fails", "[p030]") {
  Case c = Prepare(30, 64, 1024, 8);
  for (int i = 0; i < 3; ++i) {
    INFO("output " << i);
    const at::Tensor& want = c.truth[0][i];
    // bf16 sums rounded at every step, in forward and in reverse rank order, and fp32 once.
    at::Tensor fwd = c.all[0][i].clone(), rev = c.all[7][i].clone();
    at::Tensor f32 = at::zeros_like(want, at::kFloat);
    for (int r = 1; r < 8; ++r) {
      fwd = fwd + c.all[r][i];
      rev = rev + c.all[7 - r][i];
    }
    for (int r = 0; r < 8; ++r) f32 += c.all[r][i].to(at::kFloat);
    CHECK(Passes(c, i, fwd, want));
    CHECK(Passes(c, i, rev, want));
    CHECK(Passes(c, i, f32.to(want.scalar_type()), want));
    CHECK_FALSE(Passes(c, i, (f32 / 8).to(want.scalar_type()), want));
  }
}

// --- 21-25: gradient clipping, loss normalization, MoE aux loss, importance sampling --------

// PKB's own check: atol = rtol = 1e-2.
bool PassesPkb(const at::Tensor& got, const at::Tensor& want) {
  return CompareOutput(got, want, Tolerance{}).ok();
}

// The sum of ||g||^2 over `grads` in fp64: close enough to exact to stand for any order.
double SumSquares64(const std::vector<at::Tensor>& grads) {
  double s = 0;
  for (const auto& g : grads) s += g.to(at::kDouble).pow(2).sum().item<double>();
  return s;
}

TEST_CASE("p021 exact norms and a rounded coefficient pass; a local norm or zeros fail", "[p021]") {
  Case c = Prepare(21, 256, 128, 4);
  std::vector<at::Tensor> every;
  for (const auto& in : c.all) every.insert(every.end(), in.tensors.begin(), in.tensors.end());
  const double total64 = std::sqrt(SumSquares64(every));
  at::Tensor total = at::full({}, total64, at::kDouble).to(at::kFloat);
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    CHECK(Passes(c, 0, total, c.truth[r][0]));
    // Only this rank's gradients: the all-reduce forgotten.
    at::Tensor local = at::full({}, std::sqrt(SumSquares64(c.all[r].tensors)), at::kDouble);
    CHECK_FALSE(Passes(c, 0, local.to(at::kFloat), c.truth[r][0]));
    for (int g = 0; g < 3; ++g) {
      const at::Tensor& grad = c.all[r][g];
      const at::Tensor& want = c.truth[r][1 + g];
      // Coefficient rounded to the dtype first, and everything in fp64 rounded
      // once.
      at::Tensor coef16 = at::full({}, 1.0 / total64, at::kDouble).to(grad.scalar_type());
      CHECK(Passes(c, 1 + g, (grad.to(at::kFloat) * coef16.to(at::kFloat)).to(grad.scalar_type()),
                   want));
      CHECK(Passes(c, 1 + g, (grad.to(at::kDouble) / total64).to(grad.scalar_type()), want));
      CHECK_FALSE(Passes(
          c, 1 + g, (grad.to(at::kDouble) / local.item<double>()).to(grad.scalar_type()), want));
      // The clipped values are ~6e-4: PKB's atol = 1e-2 passes all zeros, ours
      // does not.
      CHECK(PassesPkb(at::zeros_like(want), want));
      CHECK_FALSE(Passes(c, 1 + g, at::zeros_like(want), want));
    }
  }
}

TEST_CASE("p022 groups tile WORLD as PKB builds them", "[p022]") {
  using Parts = std::vector<std::vector<int>>;
  auto p = FindProblem(22);
  REQUIRE(p.ok());
  RunConfig cfg;
  for (int w : {1, 2, 3, 5, 7}) {
    cfg.world = w;
    CHECK((*p)->Groups(cfg).empty());
  }
  cfg.world = 4;
  auto g4 = (*p)->Groups(cfg);
  REQUIRE(g4.size() == 2);
  CHECK(g4[0].name == "ep");
  CHECK(g4[0].partition == Parts({{0, 1}, {2, 3}}));
  CHECK(g4[1].name == "ep_fsdp");
  CHECK(g4[1].partition == Parts({{0, 2}, {1, 3}}));
  cfg.world = 8;
  auto g8 = (*p)->Groups(cfg);
  REQUIRE(g8.size() == 2);
  CHECK(g8[0].partition == Parts({{0, 1, 2, 3}, {4, 5, 6, 7}}));
  CHECK(g8[1].partition == Parts({{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  cfg.world = 6;
  CHECK((*p)->Groups(cfg)[1].partition == Parts({{0, 3}, {1, 4}, {2, 5}}));
}

TEST_CASE("p022 the expert term needs 1/ep_size and both reduction stages", "[p022]") {
  for (int w : {4, 8}) {
    Case c = Prepare(22, 128, 128, w);
    const int ep_size = w / 2;
    std::vector<at::Tensor> non_ep, ep, ep_unscaled;
    for (const auto& in : c.all) {
      non_ep.push_back(in[0]);
      ep.push_back(in[1].mul(1.0 / ep_size));
      ep_unscaled.push_back(in[1]);
    }
    const double a = SumSquares64(non_ep);
    auto total = [](double s) { return at::full({}, std::sqrt(s), at::kDouble).to(at::kFloat); };
    for (int r = 0; r < w; ++r) {
      INFO("W = " << w << ", rank " << r);
      const at::Tensor& want = c.truth[r][0];
      CHECK(Passes(c, 0, total(a + SumSquares64(ep)), want));
      CHECK_FALSE(Passes(c, 0, total(a + SumSquares64(ep_unscaled)), want));
      // The expert term reduced over this rank's EP-FSDP group only (the EP
      // stage skipped).
      std::vector<at::Tensor> fsdp_only;
      for (int q = r % ep_size; q < w; q += ep_size) fsdp_only.push_back(ep[q]);
      CHECK_FALSE(Passes(c, 0, total(a + SumSquares64(fsdp_only)), want));
      // Clipping the unscaled expert gradient.
      const double t = std::sqrt(a + SumSquares64(ep));
      CHECK(Passes(c, 2, (ep[r].to(at::kDouble) / t).to(ep[r].scalar_type()), c.truth[r][2]));
      CHECK_FALSE(Passes(c, 2, (ep_unscaled[r].to(at::kDouble) / t).to(ep[r].scalar_type()),
                         c.truth[r][2]));
    }
  }
}

// --- 26-29: MoE expert-parallel preprocessing and all-to-all ------------------------------

TEST_CASE("p026-p029 inputs draw on the meta device, so the spec can list their shapes",
          "[p026][p027][p028][p029]") {
  for (int id : {26, 27, 28, 29}) {
    INFO("problem " << id);
    auto p = FindProblem(id);
    REQUIRE(p.ok());
    RunConfig cfg;
    cfg.m = 64;
    cfg.n = 32;
    cfg.world = 4;
    Inputs cpu = (*p)->MakeInputs(cfg, 1, 0);
    cfg.device = at::Device(at::kMeta);
    Inputs meta;
    REQUIRE_NOTHROW(meta = (*p)->MakeInputs(cfg, 1, 0));
    REQUIRE(meta.tensors.size() == cpu.tensors.size());
    for (size_t i = 0; i < cpu.tensors.size(); ++i) {
      CHECK(meta[i].sizes() == cpu[i].sizes());
      CHECK(meta[i].scalar_type() == cpu[i].scalar_type());
    }
    CHECK(meta.scalars.size() == cpu.scalars.size());
  }
}

TEST_CASE("p026-p029 reject world sizes and shapes whose split lists cannot agree",
          "[p026][p027][p028][p029]") {
  auto runnable = [](int id, int64_t m, int world) {
    RunConfig cfg;
    cfg.m = m;
    cfg.n = 64;
    cfg.world = world;
    return CheckRunnable(**FindProblem(id), cfg).ok();
  };
  for (int id : {26, 28, 29}) {
    CHECK_FALSE(runnable(id, 64, 3));
    CHECK_FALSE(runnable(id, 64, 16));
    CHECK(runnable(id, 64, 8));
  }
  CHECK(runnable(26, 63, 8));        // counts only: any M
  CHECK_FALSE(runnable(28, 66, 8));  // 8 does not divide 2M = 132
  CHECK_FALSE(runnable(29, 65, 4));
  CHECK(runnable(28, 65, 2));
  CHECK_FALSE(runnable(27, 66, 4));
  CHECK(runnable(27, 66, 3));
}

// Per-expert counts of rank r's mask: slots summed, or (the mistake) tokens counted once.
std::vector<int64_t> Counts26(const Case& c, int r, bool tokens_once) {
  at::Tensor m = c.all[r][0];
  at::Tensor per = tokens_once ? m.amax(1).sum(1) : m.sum({1, 2});
  std::vector<int64_t> v;
  for (int64_t e = 0; e < 8; ++e) v.push_back(static_cast<int64_t>(per[e].item<double>()));
  return v;
}

TEST_CASE("p026 a token routed twice to one expert counts twice; other rank's experts fail",
          "[p026]") {
  Case c = Prepare(26, 64, 64, 4);
  const int w = 4, local = 2;
  // The mask is a non-contiguous view, as in PKB; the spec states its strides.
  CHECK_FALSE(c.all[0][0].is_contiguous());
  CHECK(c.all[0][0].strides() == at::IntArrayRef({1, 8, 16}));
  auto longs = [](const std::vector<int64_t>& v) {
    return at::tensor(v, at::TensorOptions().dtype(at::kLong));
  };
  for (int r = 0; r < w; ++r) {
    INFO("rank " << r);
    std::vector<int64_t> good = Counts26(c, r, false), once = Counts26(c, r, true);
    REQUIRE(good != once);  // some token picked one expert in both slots
    std::vector<int64_t> in_good(w, 0), in_once(w, 0);
    for (int e = 0; e < 8; ++e) {
      in_good[e / local] += good[e];
      in_once[e / local] += once[e];
    }
    CHECK(Passes(c, 0, longs(in_good), c.truth[r][0]));
    CHECK_FALSE(Passes(c, 0, longs(in_once), c.truth[r][0]));
    // Swapping the two split lists is wrong wherever they differ.
    if (!Same(c.truth[r][0], c.truth[r][1])) {
      CHECK_FALSE(Passes(c, 1, c.truth[r][0], c.truth[r][1]));
    }
    // The next rank's slice of the gathered counts.
    CHECK_FALSE(Passes(c, 2, c.truth[(r + 1) % w][2], c.truth[r][2]));
    // This rank's own counts for its experts, with no all-gather.
    at::Tensor own = at::zeros({local}, at::kFloat);
    for (int l = 0; l < local; ++l) own[l] = static_cast<double>(good[r * local + l]);
    CHECK_FALSE(Passes(c, 3, own, c.truth[r][3]));
    // Counts as int64 where PKB keeps fp32: a dtype mismatch.
    CHECK_FALSE(Passes(c, 3, c.truth[r][3].to(at::kLong), c.truth[r][3]));
  }
}

TEST_CASE("p027 blocks in source order pass; no exchange or a reversed order fails", "[p027]") {
  Case c = Prepare(27, 64, 32, 4);
  const int w = 4;
  const int64_t b = 16;
  for (int r = 0; r < w; ++r) {
    INFO("rank " << r);
    std::vector<at::Tensor> fwd, rev;
    for (int s = 0; s < w; ++s) {
      fwd.push_back(c.all[s][0].narrow(0, r * b, b));
      rev.push_back(c.all[w - 1 - s][0].narrow(0, r * b, b));
    }
    CHECK(Passes(c, 0, at::cat(fwd, 0), c.truth[r][0]));
    CHECK_FALSE(Passes(c, 0, at::cat(rev, 0), c.truth[r][0]));
    CHECK_FALSE(Passes(c, 0, c.all[r][0], c.truth[r][0]));
    // Block s of x sent to rank r instead of block r: rows taken from the wrong offset.
    std::vector<at::Tensor> wrong;
    for (int s = 0; s < w; ++s) wrong.push_back(c.all[s][0].narrow(0, s * b, b));
    CHECK_FALSE(Passes(c, 0, at::cat(wrong, 0), c.truth[r][0]));
  }
  Case one = Prepare(27, 64, 32, 1);
  CHECK(Same(one.truth[0][0], one.all[0][0]));
}

// The mistake in problem 28's permutation: pairs listed token-major (each token's two experts
// together) instead of expert-major.
at::Tensor TokenMajor28(const at::Tensor& map) {
  const int64_t m = map.size(1);
  return at::arange(m, at::kLong).unsqueeze(1).expand({m, 8}).masked_select(map.t().to(at::kBool));
}

// Rank r's received rows in problem 28 (before regrouping), from every rank's permuted rows.
at::Tensor Received28(const Case& c, int r, bool by_token) {
  const int64_t w = c.cfg.world, routed = 2 * c.cfg.m, b = routed / w;
  std::vector<at::Tensor> blocks;
  for (int s = 0; s < w; ++s) {
    at::Tensor map = c.all[s][1].sum(1);
    at::Tensor perm = by_token ? TokenMajor28(map) : PermutedTokenIndices(map);
    blocks.push_back(c.all[s][0].index_select(0, perm).narrow(0, r * b, b));
  }
  return at::cat(blocks, 0);
}

at::Tensor Regroup28(const Case& c, int r, const at::Tensor& received) {
  const int64_t w = c.cfg.world;
  return SortChunks(received, ToHostLongs(c.all[r][2].reshape({-1})), ToExpertMajor(w, 8 / w));
}

TEST_CASE("p028 the chunk regrouping, the expert-major order and the synthetic splits matter",
          "[p028]") {
  for (int w : {2, 4, 8}) {
    Case c = Prepare(28, 64, 32, w);
    for (int r = 0; r < w; ++r) {
      INFO("W = " << w << ", rank " << r);
      const at::Tensor& y = c.truth[r][0];
      at::Tensor received = Received28(c, r, false);
      CHECK(Same(Regroup28(c, r, received), y));
      // Without the regrouping: wrong wherever L > 1 (W < 8); identical at W = 8.
      if (w < 8) {
        CHECK_FALSE(Passes(c, 0, received, y));
      } else {
        CHECK(Same(received, y));
      }
      // Token-major pairs: the rows and perm in another order are rejected.
      CHECK_FALSE(Passes(c, 0, Regroup28(c, r, Received28(c, r, true)), y));
      at::Tensor map = c.all[r][1].sum(1);
      CHECK_FALSE(Passes(c, 2, TokenMajor28(map), c.truth[r][2]));
      // The routing map as bool (PKB returns the fp32 sum).
      CHECK_FALSE(Passes(c, 1, map.to(at::kBool), c.truth[r][1]));
      // Dispatch by expert ownership (what a real EP layer does) instead of the given splits.
      std::vector<at::Tensor> owned;
      const int64_t local = 8 / w;
      for (int64_t l = 0; l < local; ++l) {
        for (int s = 0; s < w; ++s) {
          at::Tensor m = c.all[s][1].sum(1)[r * local + l].to(at::kBool);
          owned.push_back(c.all[s][0].index_select(0, at::arange(c.cfg.m).masked_select(m)));
        }
      }
      CHECK_FALSE(Passes(c, 0, at::cat(owned, 0), y));
    }
  }
}

enum class Combine29 { kFused, kSwappedWeights, kNoRegroup, kUnweighted };

// Rank r's problem 29 output computed another way: fp32 products summed once (kFused) or with
// one standard mistake.
at::Tensor Post29(const Case& c, int r, Combine29 how) {
  const int64_t w = c.cfg.world, local = 8 / w, b = 2 * c.cfg.m / w;
  std::vector<at::Tensor> blocks;
  for (int s = 0; s < w; ++s) {
    const Inputs& in = c.all[s];
    at::Tensor z = in[0];
    if (how != Combine29::kNoRegroup) {
      z = SortChunks(z, ToHostLongs(in[3].t().reshape({-1})), ToSourceMajor(w, local));
    }
    blocks.push_back(z.narrow(0, r * b, b));
  }
  at::Tensor u = at::cat(blocks, 0).to(at::kFloat);
  const Inputs& in = c.all[r];
  at::Tensor sel = how == Combine29::kSwappedWeights ? in[2].flip(1) : in[2];
  at::Tensor dense = at::zeros({c.cfg.m, 8}, at::kFloat).scatter_(1, sel, in[1].to(at::kFloat));
  at::Tensor wrow = dense.t().contiguous().masked_select(in[4]);
  if (how == Combine29::kUnweighted) wrow = at::ones_like(wrow);
  at::Tensor out = at::zeros({c.cfg.m, c.cfg.n}, at::kFloat);
  out.index_add_(0, in[5], u * wrow.unsqueeze(1));
  return out.to(c.cfg.dtype);
}

TEST_CASE("p029 fp32 products rounded once pass; swapped weights or a missing regroup fail",
          "[p029]") {
  for (int w : {2, 4, 8}) {
    Case c = Prepare(29, 256, 256, w);
    for (int r = 0; r < w; ++r) {
      INFO("W = " << w << ", rank " << r);
      const at::Tensor& want = c.truth[r][0];
      CHECK(Passes(c, 0, Post29(c, r, Combine29::kFused), want));
      CHECK_FALSE(Passes(c, 0, Post29(c, r, Combine29::kSwappedWeights), want));
      CHECK_FALSE(Passes(c, 0, Post29(c, r, Combine29::kUnweighted), want));
      if (w < 8) CHECK_FALSE(Passes(c, 0, Post29(c, r, Combine29::kNoRegroup), want));
    }
  }
}

TEST_CASE("p029 the fused combine passes over 2M elements at W = 8 (atol 4u bounds it)", "[p029]") {
  Case c = Prepare(29, 1024, 256, 8, 1);
  for (int r = 0; r < 8; ++r) {
    INFO("rank " << r);
    CHECK(Passes(c, 0, Post29(c, r, Combine29::kFused), c.truth[r][0]));
  }
}

// Bitwise equality that also holds for 0-dim tensors (flattened before the byte
// view).
bool SameBits(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
         at::equal(a.contiguous().reshape({-1}).view(at::kByte),
                   b.contiguous().reshape({-1}).view(at::kByte));
}

// x_0 + x_1 + ... in `order`, rounded to the dtype after every addition (NCCL's bf16 SUM).
at::Tensor SumPerHop(const std::vector<at::Tensor>& x, const std::vector<int>& order) {
  at::Tensor s = x[order[0]];
  for (size_t k = 1; k < order.size(); ++k) s = s + x[order[k]];
  return s;
}

TEST_CASE("p023 exact sums pass in any order; per-hop bf16 sums and missing ranks fail", "[p023]") {
  for (int w : {4, 8}) {
    int pkb_misses = 0, pkb_missing_rank_passes = 0;
    for (int set = 0; set < 200; ++set) {
      Case c = Prepare(23, 64, 64, w, set);
      std::vector<at::Tensor> x;
      for (const auto& in : c.all) x.push_back(in[0] * in[1]);
      const at::Tensor& want = c.truth[0][1];
      std::vector<int> fwd(w), rev(w);
      for (int r = 0; r < w; ++r) fwd[r] = r, rev[r] = w - 1 - r;
      // Exact accumulation in fp32, forward and reversed, and in fp64: the same
      // bits.
      for (const auto* order : {&fwd, &rev}) {
        at::Tensor acc = at::zeros({}, at::kFloat);
        for (int r : *order) acc = acc + x[r].to(at::kFloat);
        CHECK(SameBits(acc.to(want.scalar_type()), want));
        CHECK(Passes(c, 1, acc.to(want.scalar_type()), want));
      }
      // Ring orders starting at every rank, and a pairwise tree, each rounding
      // per hop.
      std::vector<at::Tensor> hops;
      for (int start = 0; start < w; ++start) {
        std::vector<int> ring(w);
        for (int k = 0; k < w; ++k) ring[k] = (start + k) % w;
        hops.push_back(SumPerHop(x, ring));
      }
      std::vector<at::Tensor> level = x;
      while (level.size() > 1) {
        std::vector<at::Tensor> next;
        for (size_t k = 0; k < level.size(); k += 2) next.push_back(level[k] + level[k + 1]);
        level = next;
      }
      hops.push_back(level[0]);
      for (const auto& h : hops) {
        CHECK(Passes(c, 1, h, want) == SameBits(h, want));
        if (!PassesPkb(h, want)) ++pkb_misses;
      }
      // Rank m left out: rejected whenever the bits differ, which PKB's 1e-2
      // often misses.
      for (int m = 0; m < w; ++m) {
        at::Tensor acc = at::zeros({}, at::kDouble);
        for (int r = 0; r < w; ++r) {
          if (r != m) acc += x[r].to(at::kDouble);
        }
        at::Tensor missing = acc.to(want.scalar_type());
        if (SameBits(missing, want)) continue;
        CHECK_FALSE(Passes(c, 1, missing, want));
        if (PassesPkb(missing, want)) ++pkb_missing_rank_passes;
      }
    }
    INFO("W = " << w << ": per-hop orders PKB rejects " << pkb_misses
                << ", missing ranks PKB accepts " << pkb_missing_rank_passes);
    CHECK(pkb_misses > 0);
    CHECK(pkb_missing_rank_passes > 0);
  }
}

TEST_CASE("p023 normalization by the local count or a dropped backward term fail", "[p023]") {
  Case c = Prepare(23, 64, 64, 4, 1);
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    const Inputs& in = c.all[r];
    const at::Tensor& loss_sum = c.truth[r][1];
    CHECK(SameBits(loss_sum / in[2], c.truth[r][0]));
    CHECK_FALSE(Passes(c, 0, loss_sum / in[1], c.truth[r][0]));
    const at::Tensor& grad = c.truth[r][2];
    CHECK(SameBits(in[3] * in[1] / in[2] + in[4] * in[1], grad));
    CHECK_FALSE(Passes(c, 2, in[3] * in[1] / in[2], grad));
    CHECK_FALSE(Passes(c, 2, in[3] + in[4] * in[1], grad));
  }
}

// Rank r's loss with the softmax, the top-2 choice and the probability means computed by the
// caller's choices: PKB's bf16 path, a fused fp32 one, ties broken toward the higher index, ...
enum class Route24 { kPkb, kFp32, kHighIndexTies, kTop1, kLogitMeans };

double Loss24(const at::Tensor& logits, Route24 route, int64_t* ties = nullptr) {
  at::Tensor p = at::softmax(route == Route24::kFp32 ? logits.to(at::kFloat) : logits, -1);
  // A stable sort of the reversed columns puts the higher index first among equal values.
  at::Tensor chosen;
  if (route == Route24::kHighIndexTies) {
    chosen = 7 - std::get<1>(at::sort(p.flip(-1), /*stable=*/true, -1, /*descending=*/true));
  } else {
    chosen = std::get<1>(at::sort(p, /*stable=*/true, -1, /*descending=*/true));
  }
  if (ties) {
    at::Tensor v = std::get<0>(at::sort(p, -1, true));
    *ties += v.select(1, 1).eq(v.select(1, 2)).sum().item<int64_t>();
  }
  chosen = chosen.narrow(1, 0, route == Route24::kTop1 ? 1 : 2);
  at::Tensor f = at::one_hot(chosen, 8).to(at::kFloat).mean(0);
  at::Tensor pbar = route == Route24::kLogitMeans ? logits.mean(0) : p.mean(0);
  return 8 * (f * pbar.unsqueeze(0)).sum().item<double>();
}

at::Tensor Mean24(const Case& c, Route24 route, int64_t* ties = nullptr) {
  double s = 0;
  for (const auto& in : c.all) s += Loss24(in[0], route, ties);
  return at::full({}, s / c.cfg.world, at::kFloat);
}

TEST_CASE("p024 fp32 routing and reversed ties pass; top-1, logit means, no all-reduce fail",
          "[p024]") {
  for (int w : {1, 4, 8}) {
    Case c = Prepare(24, 1024, 8, w, /*set=*/1);
    const at::Tensor& want = c.truth[0][0];
    INFO("W = " << w << ", loss " << want.item<float>());
    int64_t ties = 0;
    CHECK(Passes(c, 0, Mean24(c, Route24::kPkb, &ties), want));
    CHECK(ties > 0);  // the reversed tie-break below changes something
    CHECK(Passes(c, 0, Mean24(c, Route24::kHighIndexTies), want));
    CHECK(Passes(c, 0, Mean24(c, Route24::kFp32), want));
    CHECK_FALSE(Passes(c, 0, Mean24(c, Route24::kTop1), want));
    CHECK_FALSE(Passes(c, 0, Mean24(c, Route24::kLogitMeans), want));
    if (w > 1) {
      CHECK_FALSE(Passes(c, 0, want * w, want));  // the sum over ranks, not the mean
      bool every_local_passes = true;
      for (int r = 0; r < w; ++r) {
        at::Tensor local = at::full({}, Loss24(c.all[r][0], Route24::kPkb), at::kFloat);
        every_local_passes = every_local_passes && Passes(c, 0, local, want);
      }
      CHECK_FALSE(every_local_passes);
    }
  }
}

TEST_CASE("p024 on PKB's inputs the loss is ~2 whatever the routing; the biased sets are not",
          "[p024]") {
  Case pkb = Prepare(24, 1024, 8, 4, 0);
  at::Tensor two = at::full({}, 2.0f, at::kFloat);
  CHECK(Passes(pkb, 0, two, pkb.truth[0][0]));  // a constant passes PKB's own inputs
  for (int set = 1; set < 5; ++set) {
    Case c = Prepare(24, 1024, 8, 4, set);
    INFO("set " << set);
    CHECK_FALSE(Passes(c, 0, two, c.truth[0][0]));
  }
}

// Problem 25 recomputed from per-token cross-entropies supplied by the caller, with the
// reference's dtype ops elsewhere, so that one ingredient can be changed at a time.
struct Local25 {
  at::Tensor new_lp, pg, n, p, q, r, k, e, rmin, rmax;
};

Local25 Tokens25(const Inputs& in, const at::Tensor& ce, bool clamp = true) {
  at::Tensor valid = in[2].ne(-100), invalid = valid.logical_not();
  Local25 l;
  l.new_lp = -ce;
  l.n = valid.sum().to(at::kFloat);
  at::Tensor delta = (l.new_lp - in[3]).masked_fill(invalid, 0.0);
  if (clamp) delta = delta.clamp(-20.0, 20.0);
  at::Tensor ratio = at::exp(delta);
  at::Tensor w = (ratio * in[4]).masked_fill(invalid, 0.0);
  l.pg = -w;
  l.p = l.pg.sum();
  l.q = (w * ce).sum();
  l.r = ratio.masked_fill(invalid, 0.0).sum();
  l.k = (ratio - delta - 1.0).masked_fill(invalid, 0.0).sum();
  l.e = ce.masked_fill(invalid, 0.0).sum();
  l.rmin = ratio.masked_fill(invalid, INFINITY).min();
  l.rmax = ratio.masked_fill(invalid, -INFINITY).max();
  return l;
}

// Rank r's [loss, per_token_logprobs, per_token_loss, metrics]; `local_n` normalizes by the
// rank's own token count instead of the global one.
std::vector<at::Tensor> Outputs25(const std::vector<Local25>& all, int r, bool local_n = false) {
  auto sum = [&](at::Tensor Local25::*f) {
    double s = 0;
    for (const auto& l : all) s += (l.*f).item<double>();
    return at::full({}, s, at::kDouble).to((all[0].*f).scalar_type());
  };
  at::Tensor rmin = all[0].rmin, rmax = all[0].rmax;
  for (const auto& l : all) rmin = at::minimum(rmin, l.rmin), rmax = at::maximum(rmax, l.rmax);
  at::Tensor n = (local_n ? all[r].n : sum(&Local25::n)).clamp_min(1.0);
  at::Tensor surrogate = all[r].q / n;
  at::Tensor loss = sum(&Local25::p) / n + surrogate - surrogate;
  at::Tensor metrics =
      at::stack({sum(&Local25::r) / n, rmin, rmax, sum(&Local25::k) / n, sum(&Local25::e) / n});
  return {loss, all[r].new_lp, all[r].pg, metrics};
}

bool AllPass25(const Case& c, const std::vector<Local25>& locals, int index, bool local_n = false) {
  for (int r = 0; r < c.cfg.world; ++r) {
    if (!Passes(c, index, Outputs25(locals, r, local_n)[index], c.truth[r][index])) return false;
  }
  return true;
}

TEST_CASE("p025 PKB's 1e-2 passes zeros and unclamped ratios on its inputs; ours does not",
          "[p025]") {
  // PKB's default N: logits of std 32, so every log-ratio clamps (at small N some do not, and
  // those tokens dominate the sums).
  Case c = Prepare(25, 64, 1024, 4, 0);
  std::vector<Local25> reference, unclamped;
  for (size_t r = 0; r < c.all.size(); ++r) {
    at::Tensor ce = -c.truth[r][1];
    reference.push_back(Tokens25(c.all[r], ce));
    unclamped.push_back(Tokens25(c.all[r], ce, /*clamp=*/false));
  }
  for (int index : {0, 1, 2, 3}) {
    INFO("output " << index);
    CHECK(AllPass25(c, reference, index));
  }
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    std::vector<at::Tensor> bad = Outputs25(unclamped, r);
    for (int index : {0, 2}) {
      INFO("output " << index);
      const at::Tensor& want = c.truth[r][index];
      CHECK(PassesPkb(bad[index], want));
      CHECK_FALSE(Passes(c, index, bad[index], want));
      CHECK(PassesPkb(at::zeros_like(want), want));
      CHECK_FALSE(Passes(c, index, at::zeros_like(want), want));
    }
    at::Tensor metrics = c.truth[r][3].clone();
    metrics.narrow(0, 0, 3).zero_();  // the three ratio metrics, ~2e-9 here
    CHECK(PassesPkb(metrics, c.truth[r][3]));
    CHECK_FALSE(Passes(c, 3, metrics, c.truth[r][3]));
  }
}

TEST_CASE("p025 another GEMM order passes; clamp, token count and ratio mistakes fail", "[p025]") {
  Case c = Prepare(25, 256, 64, 4, 1);
  std::vector<Local25> reference, exact_gemm, unclamped;
  for (size_t r = 0; r < c.all.size(); ++r) {
    const Inputs& in = c.all[r];
    at::Tensor ce = -c.truth[r][1];
    reference.push_back(Tokens25(in, ce));
    unclamped.push_back(Tokens25(in, ce, /*clamp=*/false));
    // Logits accumulated in fp64, rounded to the dtype, then the reference's cross-entropy.
    at::Tensor logits = at::matmul(in[0].to(at::kDouble), in[1].to(at::kDouble).t());
    exact_gemm.push_back(Tokens25(in, at::cross_entropy_loss(logits.to(in[0].scalar_type()), in[2],
                                                             {}, at::Reduction::None, -100)));
  }
  for (int index : {0, 1, 2, 3}) {
    INFO("output " << index);
    CHECK(AllPass25(c, reference, index));
    CHECK(AllPass25(c, exact_gemm, index));
  }
  CHECK_FALSE(AllPass25(c, unclamped, 2));  // 5% of tokens clamp at -20 in these sets
  CHECK_FALSE(AllPass25(c, unclamped, 3));
  CHECK_FALSE(AllPass25(c, reference, 0, /*local_n=*/true));
  CHECK_FALSE(AllPass25(c, reference, 3, /*local_n=*/true));
  // PPO-style clipping of the ratio to [0.8, 1.2] instead of the log-ratio clamp.
  std::vector<Local25> clipped = reference;
  for (int r = 0; r < 4; ++r) {
    const Inputs& in = c.all[r];
    at::Tensor invalid = in[2].eq(-100);
    at::Tensor ratio = (clipped[r].new_lp - in[3]).masked_fill(invalid, 0.0).exp();
    clipped[r].pg = -(ratio.clamp(0.8, 1.2) * in[4]).masked_fill(invalid, 0.0);
  }
  CHECK_FALSE(AllPass25(c, clipped, 2));
}

TEST_CASE("p025 fp32 logits keep the per-token log-probs within PKB's 1e-2", "[p025]") {
  for (int set : {0, 1}) {
    Case c = Prepare(25, 256, 256, 2, set);
    for (int r = 0; r < 2; ++r) {
      INFO("set " << set << ", rank " << r);
      const Inputs& in = c.all[r];
      at::Tensor logits = at::matmul(in[0].to(at::kFloat), in[1].to(at::kFloat).t());
      at::Tensor ce = -at::log_softmax(logits.to(at::kDouble), -1)
                           .gather(1, in[2].clamp_min(0).unsqueeze(1))
                           .squeeze(1)
                           .masked_fill(in[2].eq(-100), 0.0);
      CHECK(Passes(c, 1, (-ce).to(in[0].scalar_type()), c.truth[r][1]));
    }
  }
}

}  // namespace
}  // namespace pkb
