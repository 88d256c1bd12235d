// Hazard tests of the end-to-end expert-parallel MoE problems 31, 32, 49, 50 and 51 (see
// hazards.h).
#include <torch/nn/modules/linear.h>

#include <tuple>

#include "problems/ep/moe_pipeline.h"
#include "problems/harness/common.h"
#include "problems/hazards/hazards.h"
#include "problems/hazards/ties.h"

namespace pkb::hazards {
namespace {

using Parts = std::vector<std::vector<int>>;

bool Runnable(int id, int world) {
  RunConfig cfg;
  cfg.m = 64;
  cfg.n = 64;
  cfg.world = world;
  return CheckRunnable(**FindProblem(id), cfg).ok();
}

TEST_CASE("p031 p032 spread 8 experts over WORLD (W | 8), p050 p051 run at any W",
          "[p031][p032][p050][p051]") {
  for (int id : {31, 32}) {
    INFO("problem " << id);
    for (int w : {1, 2, 4, 8}) CHECK(Runnable(id, w));
    for (int w : {3, 5, 6, 7, 16}) CHECK_FALSE(Runnable(id, w));
  }
  for (int id : {50, 51}) {
    for (int w : {1, 2, 3, 4, 5, 6, 7, 8}) CHECK(Runnable(id, w));
  }
}

TEST_CASE("p051 EP blocks, expert count and top_k as PKB builds them", "[p051]") {
  auto p = FindProblem(51);
  REQUIRE(p.ok());
  const auto* moe = dynamic_cast<const MoeEpProblem*>(*p);
  REQUIRE(moe != nullptr);
  RunConfig cfg;
  cfg.m = 64;
  cfg.n = 64;
  auto layout = [&](int w) {
    cfg.world = w;
    return (*p)->Groups(cfg);
  };
  CHECK(layout(1).empty());  // E = 1 >= W: WORLD
  for (int w : {2, 3, 5, 7}) {
    INFO("W = " << w);
    CHECK(moe->NumExperts(w) == 1);
    CHECK(moe->TopK(w) == 1);
    auto g = layout(w);
    REQUIRE(g.size() == 1);
    CHECK(g[0].name == "ep");
    Parts singles;
    for (int r = 0; r < w; ++r) singles.push_back({r});
    CHECK(g[0].partition == singles);
  }
  CHECK(moe->NumExperts(4) == 2);
  CHECK(layout(4)[0].partition == Parts({{0, 1}, {2, 3}}));
  CHECK(moe->NumExperts(6) == 3);
  CHECK(layout(6)[0].partition == Parts({{0, 1, 2}, {3, 4, 5}}));
  CHECK(moe->NumExperts(8) == 4);
  CHECK(moe->TopK(8) == 2);
  CHECK(layout(8)[0].partition == Parts({{0, 1, 2, 3}, {4, 5, 6, 7}}));
  // The scalars an agent receives match.
  cfg.world = 8;
  Inputs in = (*p)->MakeInputs(cfg, 5, 0);
  CHECK(in.scalars[0].i == 4);
  CHECK(in.scalars[1].i == 2);
  CHECK(in[kMoeGateW].size(0) == 4);
  // 31, 32, 50 run over WORLD.
  for (int id : {31, 32, 50}) CHECK((*FindProblem(id))->Groups(cfg).empty());
}

TEST_CASE("p051 the second block uses its own ranks' experts, not the first block's", "[p051]") {
  Case c = Prepare(51, 64, 64, 8);
  auto p = dynamic_cast<const MoeEpProblem*>(c.p);
  for (int r = 4; r < 8; ++r) {
    INFO("rank " << r);
    const Inputs& in = c.all[r];
    std::vector<ExpertFn> block0, block1;
    for (int i = 0; i < 4; ++i) {
      auto own = [&](const Inputs& src) {
        LinearWeights g{src[kMoeGpW], src[kMoeGpB]}, u{src[kMoeUpW], src[kMoeUpB]},
            d{src[kMoeDnW], src[kMoeDnB]};
        return ExpertFn([g, u, d](const at::Tensor& x) { return SwiGluExpert(x, g, u, d); });
      };
      block0.push_back(own(c.all[i]));
      block1.push_back(own(c.all[4 + i]));
    }
    at::Tensor right = MoeEpOracle(in[kMoeX], in[kMoeGateW], in[kMoeGateB], 4, 2, block1);
    at::Tensor wrong = MoeEpOracle(in[kMoeX], in[kMoeGateW], in[kMoeGateB], 4, 2, block0);
    CHECK(Same(right, c.truth[r][0]));
    CHECK_FALSE(Passes(c, 0, wrong, c.truth[r][0]));
    CHECK(p->EpSize(8) == 4);
  }
}

TEST_CASE("p031 p032 p050 p051 Linear weights are nn.Linear's default init from the CPU generator",
          "[p031][p032][p050][p051]") {
  for (int id : {31, 32, 50, 51}) {
    INFO("problem " << id);
    auto p = FindProblem(id);
    REQUIRE(p.ok());
    RunConfig cfg;
    cfg.m = 16;
    cfg.n = 32;
    cfg.world = 2;
    Inputs in = DrawInputs(**p, cfg, 1, 0);
    // On the CPU one generator serves both: replay the three device draws, then nn.Linear.
    at::manual_seed((*p)->Seed(1, 0));
    at::randn({cfg.m, cfg.n}, at::kBFloat16);
    at::randn({in[kMoeGateW].size(0), cfg.n}, at::kBFloat16);
    at::randn({in[kMoeGateW].size(0)}, at::kBFloat16);
    torch::nn::Linear gate(cfg.n, kMoeInter), up(cfg.n, kMoeInter), down(kMoeInter, cfg.n);
    CHECK(Same(in[kMoeGpW], gate->weight.to(at::kBFloat16)));
    CHECK(Same(in[kMoeGpB], gate->bias.to(at::kBFloat16)));
    CHECK(Same(in[kMoeUpW], up->weight.to(at::kBFloat16)));
    CHECK(Same(in[kMoeUpB], up->bias.to(at::kBFloat16)));
    CHECK(Same(in[kMoeDnW], down->weight.to(at::kBFloat16)));
    CHECK(Same(in[kMoeDnB], down->bias.to(at::kBFloat16)));
  }
}

// --- 32: the tolerance of the unscaled-LoRA chain ------------------------------------------

enum : size_t { kGateA = kMoeDnB + 1, kGateB, kUpA, kUpB, kDownA, kDownB };

// How a candidate computes 32's expert: the reference's op sequence, fp32 throughout, the same
// dtype rounding points with exact (fp64) GEMM sums, or LoRA merged into the base weights.
// The mistakes: one LoRA branch dropped, or LoRA scaled by alpha / r = 2.
enum class Chain {
  kReference,
  kFp32,
  kExactGemm,
  kMerged,
  kNoGateLora,
  kNoUpLora,
  kNoDownLora,
  kAlphaScaled
};

ExpertFn Expert32(const Inputs& in, Chain chain) {
  std::vector<at::Tensor> t = in.tensors;
  return [t, chain](const at::Tensor& x) {
    const at::ScalarType dt = x.scalar_type();
    auto lin = [&](const at::Tensor& v, const at::Tensor& w, const at::Tensor& b) {
      if (chain == Chain::kExactGemm) {
        return at::linear(v.to(at::kDouble), w.to(at::kDouble), b.defined() ? b.to(at::kDouble) : b)
            .to(dt);
      }
      if (chain == Chain::kFp32)
        return at::linear(v, w.to(at::kFloat), b.defined() ? b.to(at::kFloat) : b);
      return at::linear(v, w, b);
    };
    auto lora = [&](const at::Tensor& v, size_t w, size_t a, bool drop) {
      if (chain == Chain::kMerged) {
        at::Tensor merged = (t[w].to(at::kFloat) + t[a + 1].to(at::kFloat).mm(t[a].to(at::kFloat)));
        return at::linear(v, merged.to(dt), t[w + 1]);
      }
      at::Tensor base = lin(v, t[w], t[w + 1]);
      if (drop) return base;
      at::Tensor branch = lin(lin(v, t[a], {}), t[a + 1], {});
      if (chain == Chain::kAlphaScaled) branch = branch * 2;
      return base + branch;
    };
    at::Tensor v = chain == Chain::kFp32 ? x.to(at::kFloat) : x;
    at::Tensor g = lora(v, kMoeGpW, kGateA, chain == Chain::kNoGateLora);
    at::Tensor u = lora(v, kMoeUpW, kUpA, chain == Chain::kNoUpLora);
    return lora(at::silu(g) * u, kMoeDnW, kDownA, chain == Chain::kNoDownLora);
  };
}

enum class Weights { kRight, kSwapped, kUnweighted };

// Rank r's 32 output with every rank's expert computed by `chain`; `rotate` hands each owner's
// rows to the next rank's weights (a wrong expert), `missing` >= 0 zeroes one rank's expert.
at::Tensor Out32(const Case& c, int r, Chain chain, Weights how = Weights::kRight,
                 bool rotate = false, int missing = -1) {
  const int w = c.cfg.world;
  std::vector<ExpertFn> experts;
  for (int d = 0; d < w; ++d) experts.push_back(Expert32(c.all[rotate ? (d + 1) % w : d], chain));
  if (missing >= 0) {
    experts[missing] = [](const at::Tensor& x) { return at::zeros_like(x); };
  }
  const Inputs& in = c.all[r];
  Routing route = Route(in[kMoeX], in[kMoeGateW], in[kMoeGateB], 2);
  at::Tensor wt = route.weights;
  if (how == Weights::kSwapped) wt = wt.flip(1);
  if (how == Weights::kUnweighted) wt = at::ones_like(wt);
  return MoeEpCombine(in[kMoeX], wt, route.selected, 8, experts).to(c.cfg.dtype);
}

// The largest |got - want| / (atol + rtol |want|) under 32's tolerance: below 1 passes.
double ToleranceUsed(const Case& c, const at::Tensor& got, const at::Tensor& want) {
  Tolerance t = c.p->GetTolerance(c.cfg, 0);
  at::Tensor e = want.to(at::kDouble);
  return ((got.to(at::kDouble) - e).abs() / (t.atol + t.rtol * e.abs())).max().item<double>();
}

TEST_CASE("p032 correct chains with other rounding points pass (PKB's 1e-2 rejects them)",
          "[p032]") {
  for (int w : {4, 8}) {
    Case c = Prepare(32, 64, 512, w);
    for (int r : {0, w - 1}) {  // two ranks keep CI fast; each sees every rank's expert
      INFO("W = " << w << ", rank " << r);
      const at::Tensor& want = c.truth[r][0];
      CHECK(Same(Out32(c, r, Chain::kReference), want));
      for (Chain chain : {Chain::kFp32, Chain::kExactGemm, Chain::kMerged}) {
        at::Tensor got = Out32(c, r, chain);
        // Measured at M = 64, N = 512, W = 4 and 8: at most 0.27 of the tolerance.
        CHECK(ToleranceUsed(c, got, want) < 0.5);
      }
      CHECK_FALSE(PassesPkb(Out32(c, r, Chain::kFp32), want));
    }
  }
}

TEST_CASE("p032 a wrong expert, a missing LoRA term, wrong scaling or a missing rank fail",
          "[p032]") {
  for (int w : {4, 8}) {
    Case c = Prepare(32, 64, 512, w);
    for (int r : {0, w - 1}) {
      INFO("W = " << w << ", rank " << r);
      const at::Tensor& want = c.truth[r][0];
      for (Chain chain :
           {Chain::kNoGateLora, Chain::kNoUpLora, Chain::kNoDownLora, Chain::kAlphaScaled}) {
        INFO("chain " << static_cast<int>(chain));
        at::Tensor got = Out32(c, r, chain);
        CHECK(ToleranceUsed(c, got, want) > 4);  // measured: 15 or more
        CHECK_FALSE(Passes(c, 0, got, want));
      }
      for (Weights how : {Weights::kSwapped, Weights::kUnweighted}) {
        INFO("weights " << static_cast<int>(how));
        at::Tensor got = Out32(c, r, Chain::kReference, how);
        CHECK_FALSE(Passes(c, 0, got, want));
      }
      CHECK_FALSE(Passes(c, 0, Out32(c, r, Chain::kReference, Weights::kRight, true), want));
      for (int d = 0; d < w; ++d) {
        CHECK_FALSE(Passes(c, 0, Out32(c, r, Chain::kReference, Weights::kRight, false, d), want));
      }
    }
  }
}

// --- ties at the k-th routing probability (31, 32, 49, 50, 51) -----------------------------

TEST_CASE("p031 routing tie choices: another owner counts and the same owner does not", "[p031]") {
  // Three tokens, four experts, k = 2, two experts per owner (experts 0 1 on owner 0, 2 3 on 1).
  at::Tensor probs = at::tensor({0.4, 0.2, 0.2, 0.2,     // 1 + 2 3 tied: two other choices
                                 0.3, 0.3, 0.3, 0.1,     // 0 1 2 tied for both places
                                 0.5, 0.25, 0.25, 0.0},  // 1 and 2 tied, but ...
                                at::kDouble)
                         .view({3, 4});
  Routing route{at::tensor({0.4, 0.2, 0.3, 0.3, 0.5, 0.25}, at::kDouble).view({3, 2}),
                at::tensor({0, 1, 0, 1, 0, 1}, at::kLong).view({3, 2})};
  TieChoices c = RoutingTieChoices(probs, route, 2);
  // Token 0: {0, 2} and {0, 3} send the token to owners {0, 1}, topk's {0, 1} to {0, 0}: one
  // alternative. Token 1: {0, 2} and {1, 2} give owners {0, 1}. Token 2: {0, 2}, owners {0, 1}.
  CHECK(c.token == std::vector<int64_t>{0, 1, 2});
  CHECK(c.selected == std::vector<std::vector<int64_t>>{{0, 2}, {0, 2}, {0, 2}});
  // One expert per owner: every tied expert is another owner.
  TieChoices one = RoutingTieChoices(probs, route, 1);
  CHECK(one.token == std::vector<int64_t>{0, 0, 1, 1, 2});
  CHECK(one.selected == std::vector<std::vector<int64_t>>{{0, 2}, {0, 3}, {0, 2}, {1, 2}, {0, 2}});
  // No tie at the k-th value: no choice.
  at::Tensor distinct = at::tensor({0.4, 0.3, 0.2, 0.1}, at::kDouble).view({1, 4});
  Routing top{at::tensor({0.4, 0.3}, at::kDouble).view({1, 2}),
              at::tensor({0, 1}, at::kLong).view({1, 2})};
  CHECK(RoutingTieChoices(distinct, top, 1).token.empty());
}

// Inputs where every token ties at the k-th value, with weight: the gate reads one coordinate
// of x per expert (logit e = x[t, e] + bg[e], exact in any summation order). Experts a, b and c
// read the same coordinate, a and b with the same bias and c with 0.25 more; the others' bias
// is -30. So p[t, c] ~ 0.39 leads and p[t, a] == p[t, b] ~ 0.3 tie for the second place, for
// every token of every rank (a, b, c on three different ranks).
Case TiedCase(int id, int world, int64_t a, int64_t b, int64_t c3) {
  Case c = Prepare(id, 64, 64, world);
  for (Inputs& in : c.all) {
    at::Tensor wg = at::zeros_like(in[kMoeGateW]);
    at::Tensor bg = at::full_like(in[kMoeGateB], -30.0);
    for (int64_t e = 0; e < wg.size(0); ++e) wg[e][e] = 1;
    for (int64_t e : {b, c3}) {
      wg[e][e] = 0;
      wg[e][a] = 1;
    }
    bg[a] = in[kMoeGateB][a];
    bg[b] = in[kMoeGateB][a];
    bg[c3] = in[kMoeGateB][a] + 0.25;
    in.tensors[kMoeGateW] = wg;
    in.tensors[kMoeGateB] = bg;
  }
  auto o = c.p->Oracle(c.all, c.cfg);
  REQUIRE(o.ok());
  c.truth = std::move(*o);
  return c;
}

// The experts of rank r's EP group, as each member computes its own.
std::vector<ExpertFn> GroupExperts(const Case& c, int r) {
  const auto* moe = dynamic_cast<const MoeEpProblem*>(c.p);
  const int ep = moe->EpSize(c.cfg.world), first = r / ep * ep;
  std::vector<ExpertFn> experts;
  for (int d = first; d < first + ep; ++d) {
    const Inputs& in = c.all[d];
    if (c.p->info().id == 32) {
      experts.push_back(Expert32(in, Chain::kReference));
    } else {
      LinearWeights g{in[kMoeGpW], in[kMoeGpB]}, u{in[kMoeUpW], in[kMoeUpB]},
          dn{in[kMoeDnW], in[kMoeDnB]};
      experts.push_back([g, u, dn](const at::Tensor& x) { return SwiGluExpert(x, g, u, dn); });
    }
  }
  return experts;
}

enum class TieBreak { kTopk, kReversed, kOther, kWrongMember };

// Rank r's output with its routing chosen by `how`: topk's; among equal probabilities the
// higher expert first (valid; it may agree with topk's); for every token with a tie at the k-th
// value, the first other valid routing of RoutingTieChoices (valid, never topk's owners); or
// the k-th place given to the least likely expert (a wrong member).
at::Tensor RoutedOutput(const Case& c, int r, TieBreak how) {
  const auto* moe = dynamic_cast<const MoeEpProblem*>(c.p);
  const Inputs& in = c.all[r];
  const int64_t e = moe->NumExperts(c.cfg.world), k = moe->TopK(c.cfg.world);
  at::Tensor probs = RouterProbs(in[kMoeX], in[kMoeGateW], in[kMoeGateB]);
  auto [w, sel] = at::topk(probs, k, -1);
  if (how == TieBreak::kReversed) {
    // A stable descending sort of the experts in reverse order puts the higher of equals first.
    at::Tensor order = std::get<1>(probs.flip(-1).sort(/*stable=*/true, -1, /*descending=*/true));
    sel = (e - 1) - order.narrow(-1, 0, k);
    w = probs.gather(-1, sel);
  } else if (how != TieBreak::kTopk) {
    const int64_t local = e / moe->EpSize(c.cfg.world);
    TieChoices ties = RoutingTieChoices(probs, {w, sel}, local);
    at::Tensor least = probs.argmin(-1);
    sel = sel.clone();
    for (size_t i = 0; i < ties.token.size(); ++i) {
      const int64_t t = ties.token[i];
      if (how == TieBreak::kWrongMember) {
        sel[t][k - 1] = least[t];
      } else if (i == 0 || ties.token[i - 1] != t) {
        sel[t].copy_(at::tensor(ties.selected[i], at::kLong));
      }
    }
    w = probs.gather(-1, sel);
  }
  return MoeEpCombine(in[kMoeX], w, sel, e, GroupExperts(c, r));
}

TEST_CASE(
    "p031 p032 p049 p050 p051 any expert tied at the k-th probability passes and a wrong "
    "member fails",
    "[p031][p032][p049][p050][p051]") {
  // (problem, W, tied experts a and b, the leader c: three ranks)
  const std::vector<std::tuple<int, int, int64_t, int64_t, int64_t>> cases = {
      {31, 4, 0, 7, 3}, {31, 8, 2, 5, 0}, {32, 8, 0, 7, 3},
      {49, 4, 0, 3, 1}, {50, 4, 1, 6, 3}, {51, 8, 0, 3, 1}};
  for (const auto& [id, w, a, b, lead] : cases) {
    INFO("problem " << id << " W = " << w << " tie " << a << " = " << b);
    Case c = TiedCase(id, w, a, b, lead);
    auto keys = OracleKeys(c);
    for (int r = 0; r < w; ++r) {
      INFO("rank " << r);
      const at::Tensor& want = c.truth[r][0];
      // Every token ties, with one other valid routing (a and b on different ranks).
      CHECK(keys[r][0].numel() == c.cfg.m);
      CHECK(Same(RoutedOutput(c, r, TieBreak::kTopk), want));
      CHECK(PassesWithTies(c, keys, r, {want}));
      CHECK(PassesWithTies(c, keys, r, {RoutedOutput(c, r, TieBreak::kReversed)}));
      at::Tensor other = RoutedOutput(c, r, TieBreak::kOther);
      CHECK(PassesWithTies(c, keys, r, {other}));
      CHECK_FALSE(Passes(c, 0, other, want));  // the tie matters
      CHECK_FALSE(PassesWithTies(c, keys, r, {RoutedOutput(c, r, TieBreak::kWrongMember)}));
      // Half the tokens in one valid routing, half in the other, pass too.
      at::Tensor mixed = want.clone();
      mixed.narrow(0, 0, c.cfg.m / 2).copy_(other.narrow(0, 0, c.cfg.m / 2));
      CHECK(PassesWithTies(c, keys, r, {mixed}));
    }
  }
}

TEST_CASE("p031 p050 a token sent to every expert tied at the k-th value fails", "[p031][p050]") {
  for (const auto& [id, w, a, b, lead] :
       std::vector<std::tuple<int, int, int64_t, int64_t, int64_t>>{{31, 8, 0, 7, 3},
                                                                    {50, 4, 1, 6, 3}}) {
    INFO("problem " << id << " W = " << w);
    Case c = TiedCase(id, w, a, b, lead);
    auto keys = OracleKeys(c);
    const int64_t e = dynamic_cast<const MoeEpProblem*>(c.p)->NumExperts(w);
    for (int r = 0; r < w; ++r) {
      const Inputs& in = c.all[r];
      at::Tensor probs = RouterProbs(in[kMoeX], in[kMoeGateW], in[kMoeGateB]);
      // The top 3 with the third weight kept only where it ties the second ("keep every tie").
      auto [w3, sel3] = at::topk(probs, 3, -1);
      at::Tensor tie = w3.select(1, 2).eq(w3.select(1, 1));
      w3.select(1, 2).mul_(tie.to(w3.scalar_type()));
      at::Tensor got = MoeEpCombine(in[kMoeX], w3, sel3, e, GroupExperts(c, r));
      CHECK_FALSE(PassesWithTies(c, keys, r, {got}));
    }
  }
}

TEST_CASE("p031 p032 p049 p050 p051 PKB's own inputs tie at the k-th value at M = 1024",
          "[p031][p032][p049][p050][p051]") {
  for (int id : {31, 32, 49, 50, 51}) {
    INFO("problem " << id);
    Case c = Prepare(id, 1024, 64, 8);
    auto keys = OracleKeys(c);
    int64_t tied = 0;
    for (int r = 0; r < 8; ++r) tied += keys[r][0].numel();
    CHECK(tied > 0);
  }
}

}  // namespace
}  // namespace pkb::hazards
