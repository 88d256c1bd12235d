// Hazard tests of the expert-parallel MoE problems 26-30 (see hazards.h).
#include "problems/hazards/hazards.h"
#include "problems/ep/moe_pipeline.h"

namespace pkb::hazards {
namespace {

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

TEST_CASE("p026 a token routed twice to one expert counts twice, other rank's experts fail",
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

TEST_CASE("p027 blocks in source order pass, no exchange or a reversed order fails", "[p027]") {
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

TEST_CASE("p029 fp32 products rounded once pass, swapped weights or a missing regroup fail",
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

}  // namespace
}  // namespace pkb::hazards
