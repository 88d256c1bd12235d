// Hazard tests of the FP8 communication problems 52 and 53 (see hazards.h).
#include "problems/hazards/hazards.h"
#include "problems/other/fp8_delayed_scaling.h"

namespace pkb::hazards {
namespace {

// Ways to quantize, right and wrong.
enum class Quant {
  kRight,
  kDividedScale,  // s = max(hist') / 448 by IEEE division instead of times fp32(1/448)
  kTruncate,      // E4M3 rounded toward zero
  kGlobalAmax,    // the amax all-reduced (MAX) over ranks before the scale
  kNoRoll,        // the new amax written over hist[15] without shifting: hist[0] kept
};

// Rank `r`'s dequantized values under `q` (global_amax: max over all ranks, for kGlobalAmax).
at::Tensor Recon(const Case& c, int r, Quant q) {
  const at::Tensor& x = c.all[r][0];
  const at::Tensor& hist = c.all[r][1];
  fp8::Scaling sc = fp8::UpdateScaling(x, hist);
  at::Tensor s = sc.scale;
  if (q == Quant::kDividedScale) {
    s = (sc.history.max().to(at::kDouble) / 448.0).to(at::kFloat);
  } else if (q == Quant::kGlobalAmax) {
    at::Tensor amax = at::zeros({}, at::kFloat);
    for (const auto& in : c.all) amax = at::maximum(amax, in[0].abs().max().to(at::kFloat));
    at::Tensor h = sc.history.clone();
    h[fp8::kHistoryLen - 1] = amax.to(at::kBFloat16);
    s = h.max().to(at::kFloat) * (1.0f / 448.0f);
  } else if (q == Quant::kNoRoll) {
    at::Tensor h = hist.clone();
    h[fp8::kHistoryLen - 1] = x.abs().max().to(at::kFloat).to(at::kBFloat16);
    s = h.max().to(at::kFloat) * (1.0f / 448.0f);
  }
  at::Tensor qs = x.to(at::kFloat) / s;
  at::Tensor codes = qs.to(at::kFloat8_e4m3fn);
  if (q == Quant::kTruncate) {
    // Largest E4M3 magnitude not above |q|: one code down where rounding went up.
    at::Tensor over = codes.to(at::kFloat).abs().gt(qs.abs());
    at::Tensor bits = codes.view(at::kByte).to(at::kInt);
    codes = at::where(over, bits - 1, bits).to(at::kByte).view(at::kFloat8_e4m3fn);
  }
  return fp8::Dequantize(codes, s, x.scalar_type());
}

std::vector<at::Tensor> Recons(const Case& c, Quant q) {
  std::vector<at::Tensor> out;
  for (int r = 0; r < c.cfg.world; ++r) out.push_back(Recon(c, r, q));
  return out;
}

// `code` one E4M3 step further from zero (same sign) wherever it is not the largest code.
at::Tensor BumpCodes(const at::Tensor& codes) {
  at::Tensor bits = codes.view(at::kByte).to(at::kInt);
  at::Tensor mag = bits.bitwise_and(0x7f);
  return at::where(mag.lt(0x7e), bits + 1, bits).to(at::kByte).view(at::kFloat8_e4m3fn);
}

// --- 52 ---------------------------------------------------------------------------------------

// Block `b` of the dtype sum over ranks of `parts`, added one rank at a time in the order
// `order` (rank ids), rounding to the dtype at every step as NCCL's ring does; or, with `wide`,
// in fp32 rounded once.
at::Tensor SumInOrder(const std::vector<at::Tensor>& parts, int64_t b,
                      const std::vector<int>& order, bool wide) {
  const int64_t p = parts[0].size(0) / static_cast<int64_t>(parts.size());
  at::Tensor acc;
  for (int q : order) {
    at::Tensor v = parts[q].narrow(0, b * p, p);
    if (wide) v = v.to(at::kFloat);
    acc = acc.defined() ? acc + v : v.clone();
  }
  return acc.to(parts[0].scalar_type());
}

at::Tensor DivW(const at::Tensor& sum, int w) {
  return (sum.to(at::kFloat) * (1.0f / static_cast<float>(w))).to(sum.scalar_type());
}

// Every ring order (each start, both directions), a pairwise tree and an fp32 accumulation.
std::vector<std::vector<int>> Orders(int w) {
  std::vector<std::vector<int>> orders;
  for (int start = 0; start < w; ++start) {
    std::vector<int> fwd, bwd;
    for (int k = 0; k < w; ++k) {
      fwd.push_back((start + k) % w);
      bwd.push_back((start - k + w) % w);
    }
    orders.push_back(fwd);
    orders.push_back(bwd);
  }
  return orders;
}

// Elements of `got` outside output `index`'s tolerance around `want`.
at::Tensor OutsideTolerance(const Case& c, int index, const at::Tensor& got,
                            const at::Tensor& want) {
  Tolerance t = c.p->GetTolerance(c.cfg, index);
  at::Tensor g = got.to(at::kDouble), w = want.to(at::kDouble);
  if (t.exact) return g.ne(w);
  return (g - w).abs().gt(t.atol + t.rtol * w.abs());
}

// Rank r's shard when every rank's values are `parts` and the sum runs in `order`.
at::Tensor Shard52(const Case& c, const std::vector<at::Tensor>& parts, int r,
                   const std::vector<int>& order, bool wide) {
  return DivW(SumInOrder(parts, r, order, wide), c.cfg.world);
}

TEST_CASE("p052 every summation order passes at W = 3, 4, 8 and W <= 2 is exact", "[p052]") {
  for (int w : {1, 2, 3, 4, 8}) {
    for (int set = 0; set < 3; ++set) {
      Case c = Prepare(52, 64, 64, w, set);
      auto parts = Recons(c, Quant::kRight);
      for (int r = 0; r < w; ++r) {
        INFO("W " << w << " set " << set << " rank " << r);
        const at::Tensor& want = c.truth[r][0];
        for (const auto& order : Orders(w)) {
          for (bool wide : {false, true}) {
            at::Tensor got = Shard52(c, parts, r, order, wide);
            CHECK(Passes(c, 0, got, want));
            // Two addends round once whatever the order: every schedule gives the same bits.
            if (w <= 2) CHECK(Same(got, want));
          }
        }
      }
    }
  }
}

TEST_CASE("p052 a code one E4M3 step off fails wherever reordering cannot explain it", "[p052]") {
  {  // W = 2 is exact: every bumped code that changes the shard's bits fails
    Case c = Prepare(52, 64, 64, 2);
    auto parts = Recons(c, Quant::kRight);
    const at::Tensor& x = c.all[1][0];
    fp8::Scaling sc = fp8::UpdateScaling(x, c.all[1][1]);
    at::Tensor codes = fp8::Codes(x, sc.scale);
    std::vector<at::Tensor> alt = parts;
    alt[1] = fp8::Dequantize(BumpCodes(codes), sc.scale, x.scalar_type());
    const at::Tensor& want = c.truth[0][0];
    at::Tensor got = Shard52(c, alt, 0, {0, 1}, true);
    at::Tensor changed = got.ne(want);
    // A step far below the other rank's value can vanish in the rounding; most do not.
    CHECK(changed.to(at::kDouble).mean().item<double>() > 0.9);
    // One bumped code at a time: the smallest |g| whose bump shows, and a typical one.
    at::Tensor absx = x.narrow(0, 0, 4096).abs().to(at::kFloat);
    int64_t small = at::where(changed, absx, at::full_like(absx, 1e9)).argmin().item<int64_t>();
    int64_t typical = (absx - 1.0).abs().argmin().item<int64_t>();
    for (int64_t i : {small, typical}) {
      INFO("element " << i << " |g| " << absx[i].item<double>());
      at::Tensor one = parts[1].clone();
      one.narrow(0, i, 1).copy_(alt[1].narrow(0, i, 1));
      std::vector<at::Tensor> single = parts;
      single[1] = one;
      at::Tensor shard = Shard52(c, single, 0, {1, 0}, false);
      CHECK_FALSE(Passes(c, 0, shard, want));
      if (i == small) CHECK(PassesPkb(shard, want));  // PKB's 1e-2 misses it
    }
  }
  // Bumping every code of one rank at once: each output element sees one bumped code. The step
  // is 16 s at codes in [128, 256) and 32 s from 256 up, s ~ amax / 448 ~ 0.0075-0.011.
  struct Sized {
    int w;
    int min_bits;  // 0x70: |code| >= 128; 0x78: |code| >= 256
  };
  for (Sized z : {Sized{4, 0x70}, Sized{8, 0x78}}) {
    for (int set = 0; set < 2; ++set) {
      Case c = Prepare(52, 64, 64, z.w, set);
      auto parts = Recons(c, Quant::kRight);
      const at::Tensor& x = c.all[0][0];
      fp8::Scaling sc = fp8::UpdateScaling(x, c.all[0][1]);
      at::Tensor codes = fp8::Codes(x, sc.scale);
      at::Tensor mag = codes.view(at::kByte).to(at::kInt).bitwise_and(0x7f);
      std::vector<at::Tensor> alt = parts;
      alt[0] = fp8::Dequantize(BumpCodes(codes), sc.scale, x.scalar_type());
      int64_t checked = 0;
      for (int r = 0; r < z.w; ++r) {
        INFO("W " << z.w << " set " << set << " rank " << r);
        const at::Tensor& want = c.truth[r][0];
        at::Tensor m = mag.narrow(0, r * 4096, 4096);
        at::Tensor big = m.ge(z.min_bits).logical_and(m.lt(0x7e)).logical_and(want.abs().lt(1.0));
        for (bool wide : {false, true}) {
          at::Tensor bad = OutsideTolerance(c, 0, Shard52(c, alt, r, Orders(z.w)[r], wide), want);
          CHECK(bad.masked_select(big).all().item<bool>());
        }
        checked += big.sum().item<int64_t>();
      }
      CHECK(checked > 0);  // ~900 at W = 8 on set 0, a few where the history holds 6
    }
  }
}

TEST_CASE("p052 truncation, a global or stale scale and reduce-then-quantize fail", "[p052]") {
  for (int w : {2, 4, 8}) {
    for (int set = 0; set < 2; ++set) {
      Case c = Prepare(52, 64, 64, w, set);
      INFO("W " << w << " set " << set);
      auto check_fails = [&](const std::vector<at::Tensor>& parts) {
        bool any_fails = false;
        for (int r = 0; r < w; ++r) {
          any_fails |= !Passes(c, 0, Shard52(c, parts, r, Orders(w)[0], true), c.truth[r][0]);
        }
        return any_fails;
      };
      CHECK(check_fails(Recons(c, Quant::kTruncate)));
      // An all-reduced amax moves each rank's scale by a few percent, which re-rounds codes by
      // at most a step: at W >= 4 that is within the reordering slack; at W = 2 it fails
      // wherever it changes a value (the ranks' bf16 amaxes can coincide, or the history win).
      if (w == 2) {
        auto global = Recons(c, Quant::kGlobalAmax);
        bool changed = false;
        for (int r = 0; r < w; ++r) changed |= !Same(global[r], Recons(c, Quant::kRight)[r]);
        CHECK(check_fails(global) == changed);
      }
      // Keeping the oldest entry only differs where it is the largest (the stronger sets).
      if (set > 0) CHECK(check_fails(Recons(c, Quant::kNoRoll)));
      // Summing the raw gradients first and quantizing the sum with the local scale.
      std::vector<at::Tensor> raw;
      at::Tensor sum = at::zeros_like(c.all[0][0], at::kDouble);
      for (const auto& in : c.all) sum += in[0].to(at::kDouble);
      for (int r = 0; r < w; ++r) {
        fp8::Scaling sc = fp8::UpdateScaling(c.all[r][0], c.all[r][1]);
        raw.push_back(at::zeros_like(c.all[r][0]));
        if (r == 0) raw[0] = fp8::RoundTrip(sum.to(c.cfg.dtype), sc.scale);
      }
      CHECK(check_fails(raw));
      // A rank missing from the sum.
      std::vector<at::Tensor> missing = Recons(c, Quant::kRight);
      missing[1] = at::zeros_like(missing[1]);
      CHECK(check_fails(missing));
    }
  }
}

TEST_CASE("p052 and p053 history: exact, and a wrong roll shows on the stronger sets",
          "[p052][p053]") {
  for (int id : {52, 53}) {
    for (int set = 0; set < 2; ++set) {
      Case c = Prepare(id, 64, 64, 2, set);
      for (int r = 0; r < 2; ++r) {
        INFO("problem " << id << " set " << set << " rank " << r);
        const at::Tensor& hist = c.all[r][1];
        at::Tensor amax = c.all[r][0].abs().max().to(at::kFloat).to(at::kBFloat16);
        at::Tensor left = at::cat({hist.narrow(0, 1, 15), amax.reshape({1})});
        CHECK(Same(left, c.truth[r][1]));
        // Shifted right with the new amax last (the oldest entry kept, hist[14] dropped).
        at::Tensor right = at::cat({hist.narrow(0, 0, 15), amax.reshape({1})});
        if (set == 0) {
          CHECK(Passes(c, 1, right, c.truth[r][1]));  // a constant history hides the direction
        } else {
          CHECK_FALSE(Passes(c, 1, right, c.truth[r][1]));
        }
      }
    }
  }
}

// --- 53 ---------------------------------------------------------------------------------------

at::Tensor Full53(const std::vector<at::Tensor>& parts) { return at::cat(parts, 0); }

TEST_CASE("p053 is bit-exact: any code one step off fails, even where PKB's 1e-2 passes it",
          "[p053]") {
  Case c = Prepare(53, 64, 64, 4);
  auto parts = Recons(c, Quant::kRight);
  const at::Tensor& want = c.truth[0][0];
  REQUIRE(Same(Full53(parts), want));
  const at::Tensor& x = c.all[2][0];
  fp8::Scaling sc = fp8::UpdateScaling(x, c.all[2][1]);
  at::Tensor codes = fp8::Codes(x, sc.scale);
  at::Tensor mag = codes.view(at::kByte).to(at::kInt).bitwise_and(0x7f);
  int64_t small = mag.sub(0x40).abs().argmin().item<int64_t>();    // code 2: |x| ~ 0.02
  int64_t typical = mag.sub(0x6c).abs().argmin().item<int64_t>();  // code 96: |x| ~ 1
  for (int64_t i : {small, typical}) {
    INFO("element " << i);
    at::Tensor bumped = codes.clone();
    bumped.narrow(0, i, 1).copy_(BumpCodes(codes.narrow(0, i, 1)));
    std::vector<at::Tensor> alt = parts;
    alt[2] = fp8::Dequantize(bumped, sc.scale, x.scalar_type());
    CHECK_FALSE(Passes(c, 0, Full53(alt), want));
    if (i == small) CHECK(PassesPkb(Full53(alt), want));
  }
}

TEST_CASE("p053 truncation, a global or stale scale and swapped blocks fail", "[p053]") {
  for (int set = 0; set < 2; ++set) {
    Case c = Prepare(53, 64, 64, 8, set);
    INFO("set " << set);
    const at::Tensor& want = c.truth[3][0];
    CHECK_FALSE(Passes(c, 0, Full53(Recons(c, Quant::kTruncate)), want));
    // The stronger sets' history usually outweighs every rank's amax, so there the global amax
    // changes nothing.
    if (set == 0) CHECK_FALSE(Passes(c, 0, Full53(Recons(c, Quant::kGlobalAmax)), want));
    if (set > 0) CHECK_FALSE(Passes(c, 0, Full53(Recons(c, Quant::kNoRoll)), want));
    auto parts = Recons(c, Quant::kRight);
    std::swap(parts[2], parts[5]);
    CHECK_FALSE(Passes(c, 0, Full53(parts), want));
    // An IEEE-divided scale is one fp32 ulp off for most amaxes but moves a code only where
    // the quotient sits that close to a rounding midpoint: the output shows it exactly then.
    at::Tensor divided = Full53(Recons(c, Quant::kDividedScale));
    CHECK(Passes(c, 0, divided, want) == Same(divided, want));
  }
}

}  // namespace
}  // namespace pkb::hazards
