// Hazard tests of the GNN problems: GraphBolt's relative feature exchange forward and backward
// (65, 66) (see hazards.h).
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

TEST_CASE("p065 inputs are PKB's draws; shapes at the defaults", "[p065]") {
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

TEST_CASE("p066 any fp32 order passes; bf16/fp16 exchange, absolute peers, a lost term fail",
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

TEST_CASE("p066 the gradient is float32 whatever the run dtype; shapes at the defaults", "[p066]") {
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

}  // namespace
}  // namespace pkb::hazards
