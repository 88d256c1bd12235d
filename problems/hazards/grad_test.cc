// Hazard tests of 21-25: gradient clipping, loss normalization, MoE aux loss, importance
// sampling (see hazards.h).
#include "problems/hazards/hazards.h"

namespace pkb::hazards {
namespace {

// --- 21-25: gradient clipping, loss normalization, MoE aux loss, importance sampling --------

// The sum of ||g||^2 over `grads` in fp64: close enough to exact to stand for any order.
double SumSquares64(const std::vector<at::Tensor>& grads) {
  double s = 0;
  for (const auto& g : grads) s += g.to(at::kDouble).pow(2).sum().item<double>();
  return s;
}

TEST_CASE("p021 exact norms and a rounded coefficient pass, a local norm or zeros fail", "[p021]") {
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


// x_0 + x_1 + ... in `order`, rounded to the dtype after every addition (NCCL's bf16 SUM).
at::Tensor SumPerHop(const std::vector<at::Tensor>& x, const std::vector<int>& order) {
  at::Tensor s = x[order[0]];
  for (size_t k = 1; k < order.size(); ++k) s = s + x[order[k]];
  return s;
}

TEST_CASE("p023 exact sums pass in any order, per-hop bf16 sums and missing ranks fail", "[p023]") {
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
        CHECK(Same(acc.to(want.scalar_type()), want));
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
        CHECK(Passes(c, 1, h, want) == Same(h, want));
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
        if (Same(missing, want)) continue;
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
    CHECK(Same(loss_sum / in[2], c.truth[r][0]));
    CHECK_FALSE(Passes(c, 0, loss_sum / in[1], c.truth[r][0]));
    const at::Tensor& grad = c.truth[r][2];
    CHECK(Same(in[3] * in[1] / in[2] + in[4] * in[1], grad));
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

TEST_CASE("p024 fp32 routing and reversed ties pass, top-1, logit means, no all-reduce fail",
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

TEST_CASE("p024 on PKB's inputs the loss is ~2 whatever the routing, the biased sets are not",
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

TEST_CASE("p025 PKB's 1e-2 passes zeros and unclamped ratios on its inputs, ours does not",
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

TEST_CASE("p025 another GEMM order passes, clamp, token count and ratio mistakes fail", "[p025]") {
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
}  // namespace pkb::hazards
