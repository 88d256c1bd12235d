// Hazard tests of the end-to-end expert-parallel MoE problems 31, 32, 50 and 51 (see hazards.h).
#include <torch/nn/modules/linear.h>

#include "problems/ep/moe_pipeline.h"
#include "problems/harness/common.h"
#include "problems/hazards/hazards.h"

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

}  // namespace
}  // namespace pkb::hazards
