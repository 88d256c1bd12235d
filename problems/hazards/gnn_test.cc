// Hazard tests of the GNN problems and the spherical convolution: GraphBolt's relative feature
// exchange forward and backward (65, 66), the sharded feature fetch with projection (68) and the
// torch-harmonics DISCO convolution on a polar x azimuth grid (62) (see hazards.h).
#include <optional>
#include <vector>

#include "problems/hazards/hazards.h"

namespace pkb::hazards {
namespace {

// Inputs on the meta device at `cfg`, for PKB's default shapes without the memory.
Inputs MetaInputs(int id, RunConfig cfg, int rank) {
  auto p = FindProblem(id);
  REQUIRE(p.ok());
  cfg.device = at::Device(at::kMeta);
  return (*p)->MakeInputs(cfg, rank, 0);
}

// Rank r's chunks under an addressing rule: chunk k of the output is chunk src_chunk(r, k) of
// rank src_rank(r, k)'s rows.
template <typename Rank, typename Chunk>
at::Tensor Exchanged(const std::vector<at::Tensor>& rows, int r, int64_t p, Rank src_rank,
                     Chunk src_chunk) {
  const int w = static_cast<int>(rows.size());
  std::vector<at::Tensor> out;
  for (int k = 0; k < w; ++k) {
    out.push_back(rows[src_rank(r, k, w)].narrow(0, src_chunk(r, k, w) * p, p));
  }
  return at::cat(out, 0);
}

auto Relative = [](int r, int k, int w) { return (r + k) % w; };
auto RelativeChunk = [](int r, int k, int w) { return (w - k) % w; };
auto Absolute = [](int r, int k, int w) { return k; };
auto AbsoluteChunk = [](int r, int k, int w) { return r; };
auto Reversed = [](int r, int k, int w) { return (r - k + w) % w; };
auto ReversedChunk = [](int r, int k, int w) { return k; };

// --- 65_gnn_feature_exchange_all2all -----------------------------------------------------------

TEST_CASE("p065 inputs are PKB's draws, shapes at the defaults", "[p065]") {
  Case c = Prepare(65, 256, 32, 4, 1);
  for (int r = 0; r < 4; ++r) {
    at::manual_seed(c.p->Seed(r, 1));
    at::Tensor f = at::randn({192, 32}, at::kBFloat16);  // p = 64, T = 256, Sd = 192
    at::Tensor ids = at::randint(0, 192, {256}, at::kLong);
    CHECK(Same(c.all[r][0], f));
    CHECK(Same(c.all[r][1], ids));
  }
  RunConfig cfg;
  cfg.world = 8;
  Inputs meta = MetaInputs(65, cfg, 5);
  CHECK(meta[0].sizes() == at::IntArrayRef({768, 128}));
  CHECK(meta[1].sizes() == at::IntArrayRef({1024}));
  CHECK(c.p->Outputs(cfg, 5)[0].shape == std::vector<int64_t>({1024, 128}));
}

TEST_CASE("p065 relative addressing: plain all-to-all and the reverse rotation fail", "[p065]") {
  for (int w : {2, 4, 8}) {
    Case c = Prepare(65, 64 * w, 64, w);
    std::vector<at::Tensor> gathered;
    for (const auto& in : c.all) gathered.push_back(in[0].index_select(0, in[1]));
    for (int r = 0; r < w; ++r) {
      INFO("W = " << w << ", rank " << r);
      const at::Tensor& want = c.truth[r][0];
      CHECK(Same(Exchanged(gathered, r, 64, Relative, RelativeChunk), want));
      CHECK_FALSE(Passes(c, 0, Exchanged(gathered, r, 64, Absolute, AbsoluteChunk), want));
      // At W = 2 the reverse rotation is the same permutation ((-k) mod 2 = k).
      if (w > 2) {
        CHECK_FALSE(Passes(c, 0, Exchanged(gathered, r, 64, Reversed, ReversedChunk), want));
      }
      // Exact: one bf16 ulp on one element fails.
      at::Tensor nudged = want.clone();
      nudged.view(at::kShort).view({-1}).narrow(0, 7, 1).add_(1);
      CHECK_FALSE(Passes(c, 0, nudged, want));
    }
  }
}

// --- 66_gnn_feature_exchange_all2all_backward ----------------------------------------------------

// Seed sums of rank r's exchanged rows `o`, in a chosen order and precision.
at::Tensor SeedSums(const at::Tensor& ids, const at::Tensor& o, int64_t seeds, bool reverse,
                    at::ScalarType carry) {
  at::Tensor rows = o.to(carry).to(at::kFloat);
  at::Tensor out = at::zeros({seeds, o.size(1)}, at::kFloat);
  const int64_t t = ids.size(0);
  auto id = ids.accessor<int64_t, 1>();
  for (int64_t j = 0; j < t; ++j) {
    const int64_t i = reverse ? t - 1 - j : j;
    out[id[i]] += rows[i];
  }
  return out;
}

TEST_CASE("p066 any fp32 order passes, bf16/fp16 exchange, absolute peers, a lost term fail",
          "[p066]") {
  for (int w : {1, 2, 8}) {
    Case c = Prepare(66, 64 * w, 64, w);
    std::vector<at::Tensor> grads;
    for (const auto& in : c.all) grads.push_back(in[0]);
    const int64_t seeds = 32 * w;
    for (int r = 0; r < w; ++r) {
      INFO("W = " << w << ", rank " << r);
      const at::Tensor& want = c.truth[r][0];
      const at::Tensor& ids = c.all[r][1];
      at::Tensor o = Exchanged(grads, r, 64, Relative, RelativeChunk);
      CHECK(Passes(c, 0, SeedSums(ids, o, seeds, false, at::kFloat), want));
      CHECK(Passes(c, 0, SeedSums(ids, o, seeds, true, at::kFloat), want));
      // PKB's product of a COO matrix of ones with the rows.
      at::Tensor coo = at::sparse_coo_tensor(at::stack({ids, at::arange(ids.size(0), at::kLong)}),
                                             at::ones({ids.size(0)}), {seeds, ids.size(0)});
      CHECK(Passes(c, 0, at::mm(coo, o), want));
      CHECK_FALSE(Passes(c, 0, SeedSums(ids, o, seeds, false, at::kBFloat16), want));
      CHECK_FALSE(Passes(c, 0, SeedSums(ids, o, seeds, false, at::kHalf), want));
      at::Tensor lost = SeedSums(ids.narrow(0, 1, ids.size(0) - 1), o.narrow(0, 1, o.size(0) - 1),
                                 seeds, false, at::kFloat);
      CHECK_FALSE(Passes(c, 0, lost, want));
      if (w > 1) {
        at::Tensor absolute = Exchanged(grads, r, 64, Absolute, AbsoluteChunk);
        CHECK_FALSE(Passes(c, 0, SeedSums(ids, absolute, seeds, false, at::kFloat), want));
      }
    }
  }
}

TEST_CASE("p066 the gradient is float32 whatever the run dtype, shapes at the defaults", "[p066]") {
  RunConfig cfg;
  cfg.world = 8;
  Inputs meta = MetaInputs(66, cfg, 2);
  CHECK(meta[0].sizes() == at::IntArrayRef({1024, 128}));
  CHECK(meta[0].scalar_type() == at::kFloat);
  CHECK(meta[1].sizes() == at::IntArrayRef({1024}));
  auto p = FindProblem(66);
  REQUIRE(p.ok());
  CHECK((*p)->Outputs(cfg, 2)[0].shape == std::vector<int64_t>({512, 128}));
  CHECK((*p)->Outputs(cfg, 2)[0].dtype == at::kFloat);
}

// --- 68_gnn_sparse_feature_fetch_projection ----------------------------------------------------

bool Runnable(int id, int world, at::ScalarType dtype, int64_t m = 1024, int64_t n = 1024) {
  auto p = FindProblem(id);
  REQUIRE(p.ok());
  RunConfig cfg;
  cfg.m = m;
  cfg.n = n;
  cfg.world = world;
  cfg.dtype = dtype;
  return (*p)->CanImplement(cfg).ok();
}

// Rounds fp32 values to TF32 (10 explicit mantissa bits, to nearest), as tensor cores read them.
at::Tensor RoundTf32(const at::Tensor& x) {
  at::Tensor bits = x.to(at::kFloat).contiguous().view(at::kInt);
  return at::bitwise_and(bits + 0x1000, static_cast<int64_t>(~0x1FFF)).view(at::kFloat);
}

TEST_CASE("p068 PKB's sizes at the defaults, scaled only below M = 1024 and N = 128", "[p068]") {
  RunConfig cfg;
  cfg.world = 8;
  Inputs meta = MetaInputs(68, cfg, 3);
  CHECK(meta[0].sizes() == at::IntArrayRef({13875000, 256}));  // 7.1 GB per rank in bf16
  CHECK(meta[1].sizes() == at::IntArrayRef({20000}));
  CHECK(meta[2].sizes() == at::IntArrayRef({256, 256}));
  CHECK(meta.scalars[0].i == 111000000);
  cfg.m = 4096;
  cfg.n = 128;
  meta = MetaInputs(68, cfg, 3);
  CHECK(meta[0].sizes() == at::IntArrayRef({13875000, 128}));
  CHECK(meta[1].sizes() == at::IntArrayRef({20000}));
  cfg.m = 64;
  cfg.n = 64;
  meta = MetaInputs(68, cfg, 3);
  CHECK(meta[0].sizes() == at::IntArrayRef({4096, 64}));  // Ntot = 512 M, E = N
  CHECK(meta[1].sizes() == at::IntArrayRef({1024}));      // Q = 16 M
}

TEST_CASE("p068 refuses shards that cannot fit twice on the GPU", "[p068]") {
  CHECK(Runnable(68, 8, at::kBFloat16));
  CHECK(Runnable(68, 1, at::kBFloat16));     // 52.9 GiB
  CHECK_FALSE(Runnable(68, 1, at::kFloat));  // 105.9 GiB
  CHECK(Runnable(68, 2, at::kFloat));
  CHECK_FALSE(Runnable(68, 3, at::kDouble));
  CHECK(Runnable(68, 4, at::kDouble));
  CHECK(Runnable(68, 1, at::kFloat, 64, 64));
}

TEST_CASE("p068 inputs: shard then proj from the rank's seed, ids from PKB's formula", "[p068]") {
  Case c = Prepare(68, 64, 64, 4, 1);
  const int64_t sh = 8192, q = 1024;  // Ntot = 32768
  for (int r = 0; r < 4; ++r) {
    at::manual_seed(c.p->Seed(r, 1));
    at::Tensor shard = at::randn({sh, 64}, at::kBFloat16);
    at::Tensor proj = at::randn({64, 64}, at::kBFloat16);
    CHECK(Same(c.all[r][0], shard));
    CHECK(Same(c.all[r][2], proj));
    auto ids = c.all[r][1].accessor<int64_t, 1>();
    REQUIRE(c.all[r][1].size(0) == q);
    bool formula = true;
    for (int64_t i = 0; i < q; ++i) formula &= ids[i] == ((i + r) % 4) * sh + (7 * i + r) % sh;
    CHECK(formula);
  }
}

TEST_CASE("p068 other GEMM orders pass, owner-sorted rows, own shard, a peer's proj fail",
          "[p068]") {
  for (int w : {1, 2, 8}) {
    Case c = Prepare(68, 64, 64, w);
    std::vector<at::Tensor> shards;
    for (const auto& in : c.all) shards.push_back(in[0]);
    at::Tensor table = at::cat(shards, 0);
    for (int r = 0; r < w; ++r) {
      INFO("W = " << w << ", rank " << r);
      const at::Tensor& want = c.truth[r][0];
      const at::Tensor& ids = c.all[r][1];
      at::Tensor emb = table.index_select(0, ids).to(at::kFloat);
      at::Tensor proj = c.all[r][2].to(at::kFloat);
      // Split-K: two fp32 halves added, rounded once; and the bf16 GEMM libtorch runs.
      at::Tensor split = at::matmul(emb.narrow(1, 0, 32), proj.narrow(0, 0, 32)) +
                         at::matmul(emb.narrow(1, 32, 32), proj.narrow(0, 32, 32));
      CHECK(Passes(c, 0, split.to(at::kBFloat16), want));
      CHECK(Passes(c, 0, at::matmul(table.index_select(0, ids), c.all[r][2]), want));
      if (w == 1) continue;
      at::Tensor owner = at::div(ids, table.size(0) / w, "floor");
      at::Tensor order = std::get<1>(at::sort(owner, std::optional<bool>(true), 0, false));
      at::Tensor sorted = at::matmul(emb.index_select(0, order), proj).to(at::kBFloat16);
      CHECK_FALSE(Passes(c, 0, sorted, want));
      at::Tensor own = at::matmul(
          shards[r].index_select(0, ids.remainder(shards[r].size(0))).to(at::kFloat), proj);
      CHECK_FALSE(Passes(c, 0, own.to(at::kBFloat16), want));
      at::Tensor peer = at::matmul(emb, c.all[(r + 1) % w][2].to(at::kFloat));
      CHECK_FALSE(Passes(c, 0, peer.to(at::kBFloat16), want));
    }
  }
}

TEST_CASE("p068 fp32 runs: any fp32 order passes, TF32 and bf16 fail", "[p068]") {
  auto p = FindProblem(68);
  REQUIRE(p.ok());
  Case c;
  c.p = *p;
  c.cfg.m = 64;
  c.cfg.n = 256;
  c.cfg.world = 2;
  c.cfg.dtype = at::kFloat;
  c.all = DrawAllInputs(*c.p, c.cfg, 0);
  auto o = c.p->Oracle(c.all, c.cfg);
  REQUIRE(o.ok());
  at::Tensor table = at::cat({c.all[0][0], c.all[1][0]}, 0);
  for (int r = 0; r < 2; ++r) {
    const at::Tensor& want = (*o)[r][0];
    at::Tensor emb = table.index_select(0, c.all[r][1]);
    const at::Tensor& proj = c.all[r][2];
    at::Tensor split;
    for (int64_t k = 0; k < 256; k += 64) {
      at::Tensor part = at::matmul(emb.narrow(1, k, 64), proj.narrow(0, k, 64));
      split = split.defined() ? split + part : part;
    }
    CHECK(Passes(c, 0, split, want));
    CHECK(Passes(c, 0, at::matmul(emb.to(at::kDouble), proj.to(at::kDouble)).to(at::kFloat), want));
    CHECK_FALSE(Passes(c, 0, at::matmul(RoundTf32(emb), RoundTf32(proj)), want));
    CHECK_FALSE(Passes(
        c, 0, at::matmul(emb.to(at::kBFloat16), proj.to(at::kBFloat16)).to(at::kFloat), want));
  }
}

// --- 62_torchharmonics_spherical_convolution ---------------------------------------------------

// Ways to get problem 62 right or wrong, each computed from every rank's inputs in fp32.
enum class Disco {
  kRolledBmm,       // PKB's route: nlon dense bmm calls on rolled copies of x (passes)
  kTf32Mix,         // the channel mix reads TF32-rounded y and weight
  kBf16Reduce,      // every polar share rounded to bf16 before the sum
  kSwappedGroups,   // polar groups contiguous, azimuth strided: rank r = a P + p
  kConvolution,     // x[(lam - q) mod nlon] instead of x[(lam + q) mod nlon]
  kReversedValues,  // psi values taken in reverse order within each row of four
};

// Rank r's output under `how`.
std::vector<at::Tensor> Disco62(const Case& c, Disco how) {
  const int w = c.cfg.world;
  const int64_t az = w % 2 == 0 ? 2 : 1, np = w / az;
  const at::Tensor& x0 = c.all[0][0];
  const int64_t b = x0.size(0), ch = x0.size(1), lat_l = x0.size(2), lon_l = x0.size(3);
  const int64_t nlon = lon_l * az, nlat = lat_l * np, cl = ch / az, kk = 3;
  auto rank_of = [&](int64_t p, int64_t a) {
    return how == Disco::kSwappedGroups ? a * np + p : p * az + a;
  };
  at::Tensor y = at::zeros({b, ch, kk, nlat, nlon}, at::kFloat);
  for (int64_t a2 = 0; a2 < az; ++a2) {    // channel block
    for (int64_t p2 = 0; p2 < np; ++p2) {  // polar share
      std::vector<at::Tensor> blocks;
      for (int64_t a = 0; a < az; ++a) blocks.push_back(c.all[rank_of(p2, a)][0]);
      at::Tensor field = at::cat(blocks, 3).narrow(1, a2 * cl, cl);  // (B, cl, lat_l, nlon)
      const Inputs& in = c.all[rank_of(p2, a2)];
      at::Tensor idx = in[1], vals = in[2];
      if (how == Disco::kReversedValues) vals = vals.view({-1, 4}).flip(1).reshape({-1});
      at::Tensor psi = at::zeros({kk, nlat, lat_l * nlon}, at::kFloat);
      psi.view({-1}).index_add_(0, (idx[0] * nlat + idx[1]) * (lat_l * nlon) + idx[2], vals);
      at::Tensor xr = field.reshape({b * cl, lat_l * nlon}).t().reshape({lat_l, nlon, b * cl});
      at::Tensor share = at::zeros({nlon, kk, nlat, b * cl}, at::kFloat);
      for (int64_t q = 0; q < nlon; ++q) {
        share[q] = at::bmm(psi, xr.reshape({lat_l * nlon, b * cl}).expand({kk, -1, -1}));
        const int64_t shift = how == Disco::kConvolution ? 1 : -1;
        xr = at::roll(xr, {shift}, {1});
      }
      share = share.permute({3, 1, 2, 0}).reshape({b, cl, kk, nlat, nlon});
      if (how == Disco::kBf16Reduce) share = share.to(at::kBFloat16).to(at::kFloat);
      y.narrow(1, a2 * cl, cl).add_(share);
    }
  }
  std::vector<at::Tensor> out;
  for (int r = 0; r < w; ++r) {
    const int64_t p = r / az, a = r % az;
    at::Tensor block = y.narrow(3, p * lat_l, lat_l).narrow(4, a * lon_l, lon_l);
    at::Tensor weight = c.all[r][3];
    if (how == Disco::kTf32Mix) {
      block = RoundTf32(block);
      weight = RoundTf32(weight);
    }
    out.push_back(at::einsum("bckxy,ock->boxy", {block, weight}) + c.all[r][4].view({1, -1, 1, 1}));
  }
  return out;
}

TEST_CASE("p062 groups: azimuth contiguous, polar strided, PKB's draws and psi layout", "[p062]") {
  auto p = FindProblem(62);
  REQUIRE(p.ok());
  RunConfig cfg;
  cfg.world = 8;
  auto groups = (*p)->Groups(cfg);
  REQUIRE(groups.size() == 2);
  CHECK(groups[0].name == "azimuth");
  CHECK(groups[0].partition == std::vector<std::vector<int>>{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  CHECK(groups[1].name == "polar");
  CHECK(groups[1].partition == std::vector<std::vector<int>>{{0, 2, 4, 6}, {1, 3, 5, 7}});
  cfg.world = 3;
  groups = (*p)->Groups(cfg);
  CHECK(groups[0].partition == std::vector<std::vector<int>>{{0}, {1}, {2}});
  CHECK(groups[1].partition == std::vector<std::vector<int>>{{0, 1, 2}});

  // PKB's shapes at the defaults (W = 8 and W = 6, where nlat rounds up to 129).
  cfg.world = 8;
  Inputs meta = MetaInputs(62, cfg, 5);
  CHECK(meta[0].sizes() == at::IntArrayRef({32, 8, 32, 128}));
  CHECK(meta[1].sizes() == at::IntArrayRef({3, 1536}));
  CHECK(meta[2].sizes() == at::IntArrayRef({1536}));
  CHECK((*p)->Outputs(cfg, 5)[0].shape == std::vector<int64_t>({32, 8, 32, 128}));
  cfg.world = 6;
  meta = MetaInputs(62, cfg, 5);
  CHECK(meta[0].sizes() == at::IntArrayRef({32, 8, 43, 129}));

  // Draw order x, weight, bias, vals; psi entries at (k, o, l(o) nlon + (o + e(k+1)) mod nlon).
  Case c = Prepare(62, 64, 64, 8);  // B = 2, nlat = 16, nlon = 32, lat_l = 4
  for (int r = 0; r < 8; ++r) {
    INFO("rank " << r);
    at::manual_seed(c.p->Seed(r, 0));
    at::Tensor x = at::randn({2, 8, 4, 16});
    at::Tensor weight = at::randn({8, 8, 3});
    at::Tensor bias = at::randn({8});
    at::Tensor vals = at::randn({192}) * 0.05;
    CHECK(Same(c.all[r][0], x));
    CHECK(Same(c.all[r][3], weight));
    CHECK(Same(c.all[r][4], bias));
    CHECK(Same(c.all[r][2], vals));
    const int64_t pr = r / 2;
    auto idx = c.all[r][1].accessor<int64_t, 2>();
    bool layout = true;
    for (int64_t k = 0; k < 3; ++k) {
      for (int64_t o = 0; o < 16; ++o) {
        for (int64_t e = 0; e < 4; ++e) {
          const int64_t n = (k * 16 + o) * 4 + e, l = ((o - 4 * pr) % 4 + 4) % 4;
          layout &= idx[0][n] == k && idx[1][n] == o && idx[2][n] == l * 32 + (o + e * (k + 1));
        }
      }
    }
    CHECK(layout);
  }
}

TEST_CASE("p062 PKB's rolled bmm passes, TF32, bf16 reduce, swapped groups, convolution fail",
          "[p062]") {
  for (int w : {1, 2, 4, 6, 8}) {
    Case c = Prepare(62, 64, 64, w);
    auto rolled = Disco62(c, Disco::kRolledBmm);
    auto tf32 = Disco62(c, Disco::kTf32Mix);
    auto bf16 = Disco62(c, Disco::kBf16Reduce);
    auto swapped = Disco62(c, Disco::kSwappedGroups);
    auto conv = Disco62(c, Disco::kConvolution);
    auto reversed = Disco62(c, Disco::kReversedValues);
    const int64_t np = w / (w % 2 == 0 ? 2 : 1);
    for (int r = 0; r < w; ++r) {
      INFO("W = " << w << ", rank " << r);
      const at::Tensor& want = c.truth[r][0];
      CHECK(Passes(c, 0, rolled[r], want));
      CHECK((rolled[r] - want).abs().max().item<double>() < 2e-6);  // a 5x margin at least
      CHECK_FALSE(Passes(c, 0, tf32[r], want));
      CHECK_FALSE(Passes(c, 0, conv[r], want));
      CHECK_FALSE(Passes(c, 0, reversed[r], want));
      if (np > 1) CHECK_FALSE(Passes(c, 0, bf16[r], want));
      if (w >= 4 && !Same(swapped[r], rolled[r])) CHECK_FALSE(Passes(c, 0, swapped[r], want));
    }
  }
}

}  // namespace
}  // namespace pkb::hazards
