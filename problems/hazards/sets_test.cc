// Hazard tests of the problems whose output shapes depend on the rank or the input set, and of
// their set-specific inputs: 63, 69, 81, 85 (see hazards.h).
#include <cmath>
#include <tuple>

#include "problems/hazards/hazards.h"
#include "problems/hazards/ties.h"

namespace pkb::hazards {
namespace {

// Every rank's inputs draw on the meta device with the CPU draw's shapes and dtypes.
void CheckMetaDraw(int id, int64_t m, int64_t n, int world, int set) {
  auto p = FindProblem(id);
  REQUIRE(p.ok());
  RunConfig cfg;
  cfg.m = m;
  cfg.n = n;
  cfg.world = world;
  for (int r = 0; r < world; ++r) {
    INFO("problem " << id << " rank " << r << " set " << set);
    cfg.device = at::kCPU;
    Inputs cpu = (*p)->MakeInputs(cfg, r, set);
    cfg.device = at::Device(at::kMeta);
    Inputs meta;
    REQUIRE_NOTHROW(meta = (*p)->MakeInputs(cfg, r, set));
    REQUIRE(meta.tensors.size() == cpu.tensors.size());
    for (size_t i = 0; i < cpu.tensors.size(); ++i) {
      CHECK(meta[i].sizes() == cpu[i].sizes());
      CHECK(meta[i].scalar_type() == cpu[i].scalar_type());
    }
    CHECK(meta.scalars.size() == cpu.scalars.size());
  }
}

// The declared shapes of input set `set` against the oracle's outputs, on every rank.
void CheckDeclaredShapes(const Case& c, int set) {
  for (int r = 0; r < c.cfg.world; ++r) {
    INFO("rank " << r << " set " << set);
    auto decls = c.p->OutputsOfSet(c.cfg, r, set);
    CHECK(CheckAgainstDeclaration(decls, c.truth[r]).ok());
    auto set0 = c.p->OutputsOfSet(c.cfg, r, 0), plain = c.p->Outputs(c.cfg, r);
    REQUIRE(set0.size() == plain.size());
    for (size_t i = 0; i < plain.size(); ++i) CHECK(set0[i].shape == plain[i].shape);
  }
}

// --- 85_distributed_sample_sort --------------------------------------------------------------

TEST_CASE("p085 set 3 empties the odd shards and the output shapes follow every rank's n",
          "[p085]") {
  for (int set : {0, 3}) {
    Case c = Prepare(85, 1024, 64, 8, set);
    CheckDeclaredShapes(c, set);
    int64_t total = 0;
    for (int r = 0; r < 8; ++r) {
      INFO("rank " << r);
      const int64_t n = c.all[r][0].numel();
      CHECK(n == (set == 3 && r % 2 == 1 ? 0 : 128));
      total += n;
    }
    CHECK(total == (set == 3 ? 512 : 1024));
    for (int r = 0; r < 8; ++r) CHECK(c.truth[r][0].numel() == total / 8);
  }
  // W = 3 with M = 64: n = 21 on ranks 0 and 2 in set 3 (42 elements), 14 per rank.
  Case c = Prepare(85, 64, 64, 3, 3);
  CheckDeclaredShapes(c, 3);
  CHECK(c.truth[0][0].numel() == 14);
  CheckMetaDraw(85, 64, 64, 4, 3);
}

TEST_CASE("p085 bf16 duplicates leave no freedom (exact): local, descending or unbalanced fails",
          "[p085]") {
  const int w = 8;
  Case c = Prepare(85, 1024, 64, w, 0);
  std::vector<at::Tensor> shards;
  for (const auto& in : c.all) shards.push_back(in[0]);
  at::Tensor whole = at::cat(shards);
  // Many duplicate values in bf16 (rank 7's offset 896 leaves 4-wide bf16 steps).
  CHECK(std::get<0>(at::_unique(whole)).numel() < whole.numel() * 3 / 4);
  at::Tensor stable = std::get<0>(whole.sort(/*stable=*/true, 0, false));
  at::Tensor descending = std::get<0>(whole.sort(/*stable=*/true, 0, true));
  const int64_t share = whole.numel() / w;
  for (int r = 0; r < w; ++r) {
    INFO("rank " << r);
    const at::Tensor& want = c.truth[r][0];
    CHECK(Passes(c, 0, stable.narrow(0, r * share, share), want));
    CHECK_FALSE(Passes(c, 0, descending.narrow(0, r * share, share), want));
    // The rank's own shard sorted, without the exchange.
    CHECK_FALSE(Passes(c, 0, std::get<0>(c.all[r][0].sort()), want));
    // The neighbour's slice (a rebalancing off by one share).
    CHECK_FALSE(Passes(c, 0, stable.narrow(0, ((r + 1) % w) * share, share), want));
  }
  // One bf16 ulp off in one element: PKB's 1e-2 passes it near the large offsets, exact does not.
  at::Tensor want = c.truth[0][0];  // the smallest values: rank 7's, near -946..-846
  at::Tensor off = want.clone();
  off[0] = want[0].item<double>() - 4.0;  // a bf16 step there is 4
  CHECK(PassesPkb(off, want));
  CHECK_FALSE(Passes(c, 0, off, want));
}

TEST_CASE("p085 rebalancing gives the remainder to the first ranks", "[p085]") {
  // W = 3, M = 70, set 3: n = 23 on ranks 0 and 2, rank 1 empty; 46 = 3 * 15 + 1.
  Case c = Prepare(85, 70, 64, 3, 3);
  CHECK(c.truth[0][0].numel() == 16);
  CHECK(c.truth[1][0].numel() == 15);
  CHECK(c.truth[2][0].numel() == 15);
  std::vector<at::Tensor> shards;
  for (const auto& in : c.all) shards.push_back(in[0]);
  at::Tensor sorted = std::get<0>(at::cat(shards).sort());
  // The remainder given to the last rank instead: rank 0's slice is one short.
  CHECK_FALSE(Passes(c, 0, sorted.narrow(0, 0, 15), c.truth[0][0]));
  CHECK(Passes(c, 0, sorted.narrow(0, 16, 15), c.truth[1][0]));
  CHECK_FALSE(Passes(c, 0, sorted.narrow(0, 15, 15), c.truth[1][0]));
}

// --- 69_gnn_negative_scoring -----------------------------------------------------------------

// 1 + #{j : s(neg_j) > s(pos)} for a sigmoid `s` given as a function of fp32 scores.
template <typename Sigmoid>
at::Tensor RankWith(const at::Tensor& pos, const at::Tensor& neg, Sigmoid s, bool ties = false) {
  at::Tensor sp = s(pos.to(at::kFloat)).view({-1, 1}), sn = s(neg.to(at::kFloat));
  at::Tensor above = ties ? sn.ge(sp) : sn.gt(sp);
  return above.sum(1).to(at::kLong) + 1;
}

TEST_CASE(
    "p069 any order among equal scores passes (ties behind, ahead, torch.sort's, fp32 or raw "
    "comparisons), ranks outside the tie range fail",
    "[p069][ties]") {
  const int w = 8;
  Case c = Prepare(69, 1024, 1024, w, 0);
  CheckDeclaredShapes(c, 0);
  const auto keys = OracleKeys(c);
  std::vector<at::Tensor> pos, neg;
  for (int r = 0; r < w; ++r) {
    CHECK(c.all[r][0].numel() == 128 + r % 3);  // P_r depends on the rank
    pos.push_back(c.all[r][0]);
    neg.push_back(c.all[r][1]);
  }
  at::Tensor p = at::cat(pos), n = at::cat(neg);
  const at::Tensor& want = c.truth[0][0];
  REQUIRE(want.numel() == 1031);
  auto passes = [&](const at::Tensor& got) {
    for (int r = 0; r < w; ++r) {
      if (!PassesWithTies(c, keys, r, {got})) return false;
    }
    return true;
  };
  auto bf16_tanh = [](const at::Tensor& x) {
    return (at::tanh(x * 0.5) * 0.5 + 0.5).to(at::kBFloat16);
  };
  auto bf16_fp64 = [](const at::Tensor& x) {
    return at::sigmoid(x.to(at::kDouble)).to(at::kBFloat16);
  };
  auto fp32 = [](const at::Tensor& x) { return at::sigmoid(x); };
  auto bf16 = [](const at::Tensor& x) { return at::sigmoid(x).to(at::kBFloat16); };
  auto raw = [](const at::Tensor& x) { return x; };
  const at::Tensor ties_first = RankWith(p, n, bf16, /*ties=*/true);
  // The range is real: many rows have a negative tied with the positive.
  const double tied_rows = ties_first.ne(want).to(at::kDouble).mean().item<double>();
  INFO("rows with a tie: " << tied_rows);
  CHECK(tied_rows > 0.3);
  CHECK(keys[0][0].equal(ties_first));
  // Ties behind (stable), ahead (equal negatives first), anywhere between (torch.sort's unstable
  // order), or ordered by fp32 sigmoids or raw scores: all inside the range, all pass.
  CHECK(passes(RankWith(p, n, bf16)));
  CHECK(passes(ties_first));
  const at::Tensor anywhere =
      want + (at::rand(want.sizes(), at::kDouble) * (ties_first - want + 1).to(at::kDouble))
                 .floor()
                 .to(at::kLong);
  CHECK(anywhere.ne(want).any().item<bool>());
  CHECK(passes(anywhere));
  at::Tensor scores = at::cat({p.view({-1, 1}), n}, 1).sigmoid();
  at::Tensor order = std::get<1>(scores.sort(/*stable=*/false, 1, /*descending=*/true));
  CHECK(passes(order.eq(0).nonzero().select(1, 1).contiguous() + 1));
  const at::Tensor flipped = at::cat({p.view({-1, 1}), n}, 1).flip(1).sigmoid();
  const int64_t last = flipped.size(1) - 1;  // the positive sorted after equal negatives
  at::Tensor stable_last = std::get<1>(flipped.sort(/*stable=*/true, 1, /*descending=*/true));
  CHECK(stable_last.eq(last).nonzero().select(1, 1).contiguous().add(1).equal(ties_first));
  CHECK(passes(RankWith(p, n, fp32)));
  CHECK(passes(RankWith(p, n, raw)));
  // Rounded sigmoids from another formula or precision: within the +-1 outlier budget.
  CHECK(passes(RankWith(p, n, bf16_tanh)));
  CHECK(passes(RankWith(p, n, bf16_fp64)));
  // Outside the range: one past the ties-first rank, one before the stable rank, on every row.
  CHECK_FALSE(passes(ties_first + 1));
  CHECK_FALSE(passes(want - 1));
  // Rows in another rank order (the gather in reverse).
  std::vector<at::Tensor> rp(pos.rbegin(), pos.rend()), rn(neg.rbegin(), neg.rend());
  CHECK_FALSE(passes(RankWith(at::cat(rp), at::cat(rn), bf16)));
  // Beyond the budget: 2% of the rows one past the range; 1% passes.
  at::Tensor shifted = ties_first.clone();
  shifted.narrow(0, 0, 21) += 1;
  CHECK_FALSE(passes(shifted));
  shifted = ties_first.clone();
  shifted.narrow(0, 0, 10) += 1;
  CHECK(passes(shifted));
  // Poison is never a rank in the range.
  at::Tensor poisoned = want.clone();
  Poison(poisoned);
  CHECK_FALSE(passes(poisoned));
  // PKB's own check: rtol = 1e-2 forgives ties only where the rank is large.
  CHECK_FALSE(PassesPkb(ties_first, want));
}

TEST_CASE("p069 inputs draw on the meta device with rank-dependent shapes", "[p069]") {
  CheckMetaDraw(69, 1024, 1024, 8, 0);
  CheckMetaDraw(69, 64, 64, 3, 1);
}

// --- 81_sam3_allgather_iou_suppression -------------------------------------------------------

// IoU of the gathered masks of input set `c`'s ranks, and the gathered fp32 masks.
std::pair<at::Tensor, at::Tensor> GatheredIou(const Case& c) {
  std::vector<at::Tensor> masks;
  for (const auto& in : c.all) masks.push_back(in[0].to(at::kFloat));
  at::Tensor g = at::cat(masks);
  at::Tensor b = g.gt(0).flatten(1).to(at::kFloat);
  at::Tensor inter = at::matmul(b, b.t()), area = b.sum(1);
  at::Tensor iou = inter / (area.unsqueeze(1) + area.unsqueeze(0) - inter).clamp_min(1.0);
  return {iou, g};
}

TEST_CASE("p081 set 0 (PKB's) suppresses nothing, sets 1 and 2 do, and never suppressing fails",
          "[p081]") {
  const int w = 8;
  // M = 1024: PKB's 256 x 256 masks; M = 64: the CPU check's 16 x 16.
  const std::vector<std::pair<int, int>> cases = {{1024, 0}, {1024, 1}, {1024, 2},
                                                  {64, 0},   {64, 1},   {64, 2}};
  for (auto [m, set] : cases) {
    INFO("M = " << m << " set " << set);
    Case c = Prepare(81, m, 64, w, set);
    CheckDeclaredShapes(c, set);
    auto [iou, gathered] = GatheredIou(c);
    const int64_t nt = iou.size(0);
    at::Tensor off_diag = iou.masked_select(at::eye(nt, at::kBool).logical_not());
    // No IoU near the threshold, so any exact IoU >= 0.7 test agrees.
    CHECK((off_diag - 0.7).abs().min().item<double>() > 0.05);
    const at::Tensor& suppressed = c.truth[0][2];
    const int64_t fired = suppressed.sum().item<int64_t>();
    if (set == 0) {
      if (m == 1024) CHECK(off_diag.max().item<double>() < 0.6);
      CHECK(fired == 0);
      continue;
    }
    CHECK(fired > 0);
    CHECK(fired < nt);
    // A candidate that never suppresses: the gathered masks as they are, nothing flagged.
    for (int r = 0; r < w; ++r) {
      INFO("rank " << r);
      CHECK_FALSE(Passes(c, 0, gathered, c.truth[r][0]));
      CHECK_FALSE(Passes(c, 2, at::zeros_like(suppressed), c.truth[r][2]));
    }
    // Suppressing the earlier-occluded object of each pair instead (reverse = True).
    const at::Tensor last = c.all[0][2];
    at::Tensor over = at::triu(iou.ge(0.7), 1);
    at::Tensor li = last.view({nt, 1}), lj = last.view({1, nt});
    at::Tensor rev = over.logical_and(li.lt(lj)).logical_and(lj.gt(-1)).any(1).logical_or(
        over.logical_and(lj.lt(li)).logical_and(li.gt(-1)).any(0));
    CHECK_FALSE(Passes(c, 2, rev, suppressed));
  }
}

TEST_CASE("p081 object counts follow the set and inputs draw on the meta device", "[p081]") {
  Case c = Prepare(81, 64, 64, 8, 3);  // set 3: counts as set 0 (period 3)
  CHECK(c.truth[0][0].size(0) == 15);
  Case d = Prepare(81, 64, 64, 4, 1);  // counts [2, 3, 1, 2]
  CHECK(d.truth[0][0].size(0) == 8);
  CHECK(d.all[1][0].size(0) == 3);
  CheckDeclaredShapes(d, 1);
  CheckMetaDraw(81, 64, 64, 4, 0);
  CheckMetaDraw(81, 64, 64, 4, 2);
}

// --- 63_deepmd_kalman_filter_optimizer -------------------------------------------------------

constexpr int kBlocks63 = 8, kErr63 = 8, kW63 = 9, kP63 = 17;
constexpr double kLambda63 = 0.98;

// One rank's updated weights and P for a given A, with options for the usual mistakes.
struct Step63 {
  bool k_is_h = false;     // K = h (P assumed to be the identity)
  bool fp32 = false;       // the update term computed in fp32
  bool reordered = false;  // P / lambda - (A / lambda) K K^T, K h for h^T P h (correct)
};
std::pair<std::vector<at::Tensor>, std::vector<at::Tensor>> Update63(const Inputs& in,
                                                                     const at::Tensor& a,
                                                                     Step63 s) {
  std::vector<at::Tensor> w, p;
  for (int i = 0; i < kBlocks63; ++i) {
    const at::Tensor &h = in[i], &pi = in[kP63 + i];
    at::Tensor k = s.k_is_h ? h : at::matmul(pi, h);
    at::Tensor upd = at::matmul(k, k.t());
    if (s.fp32) upd = at::matmul(k.to(at::kFloat), k.t().to(at::kFloat)).to(at::kDouble);
    w.push_back(in[kW63 + i] + (a * in[kErr63]) * k);
    p.push_back(s.reordered ? pi / kLambda63 - (a / kLambda63) * upd : (pi - a * upd) / kLambda63);
  }
  return {w, p};
}

at::Tensor Denominator63(const Inputs& in, bool k_is_h, bool reordered) {
  at::Tensor t = at::zeros({1, 1}, at::kDouble);
  for (int i = 0; i < kBlocks63; ++i) {
    const at::Tensor &h = in[i], &pi = in[kP63 + i];
    at::Tensor q = k_is_h      ? at::matmul(h.t(), h)
                   : reordered ? at::matmul(at::matmul(pi, h).t(), h)
                               : at::matmul(at::matmul(h.t(), pi), h);
    t = t + (kLambda63 + q);
  }
  return t;
}

// Whether every output of every rank passes when each rank's step is `s` and A comes from
// the denominators summed over `ranks_in_sum` (all ranks, or the rank alone).
bool Passes63(const Case& c, Step63 s, bool all_reduce,
              bool (*pass)(const Case&, int, const at::Tensor&, const at::Tensor&)) {
  const int w = c.cfg.world;
  at::Tensor total = at::zeros({1, 1}, at::kDouble);
  for (int r = w - 1; r >= 0; --r)  // the reverse of the oracle's order
    total = total + Denominator63(c.all[r], s.k_is_h, s.reordered);
  std::vector<std::vector<at::Tensor>> weights(w), ps(w);
  for (int r = 0; r < w; ++r) {
    at::Tensor t = all_reduce ? total : Denominator63(c.all[r], s.k_is_h, s.reordered);
    std::tie(weights[r], ps[r]) = Update63(c.all[r], 1 / t, s);
  }
  bool ok = true;
  for (int r = 0; r < w; ++r) {
    int index = 0;
    for (int s2 = 0; s2 < w; ++s2) {
      for (int i = 0; i < kBlocks63; ++i, ++index)
        ok &= pass(c, index, weights[s2][i], c.truth[r][index]);
    }
    for (int i = 0; i < kBlocks63; ++i, ++index) ok &= pass(c, index, ps[r][i], c.truth[r][index]);
  }
  return ok;
}

bool Ours(const Case& c, int i, const at::Tensor& got, const at::Tensor& want) {
  return Passes(c, i, got, want);
}
bool Pkb(const Case&, int, const at::Tensor& got, const at::Tensor& want) {
  return PassesPkb(got, want);
}

TEST_CASE("p063 fp64 tolerance: reordered fp64 passes, no update, no all-reduce, fp32 fail",
          "[p063]") {
  for (int w : {1, 4}) {
    for (int set : {0, 1}) {
      INFO("W = " << w << " set " << set);
      Case c = Prepare(63, 64, 64, w, set);
      REQUIRE(c.truth[0].size() == static_cast<size_t>(8 * w + 9));
      CHECK(Passes63(c, {}, true, Ours));
      CHECK(Passes63(c, {false, false, true}, true, Ours));
      CHECK_FALSE(Passes63(c, {false, true, false}, true, Ours));  // fp32 update
      if (w > 1) {
        CHECK_FALSE(Passes63(c, {}, false, Ours));         // A from the local sum only,
        if (set == 0) CHECK(Passes63(c, {}, false, Pkb));  // which PKB's 1e-2 accepts
      }
      // K = h: the same as P h where P = I (set 0), wrong on the stronger sets.
      if (set == 0) {
        CHECK(Passes63(c, {true, false, false}, true, Ours));
      } else {
        CHECK_FALSE(Passes63(c, {true, false, false}, true, Ours));
      }
      // No update at all: weights as given, P / lambda. PKB's tolerance passes it.
      for (int r = 0; r < w; ++r) {
        INFO("rank " << r);
        const int own = 8 * r, p0 = 8 * w;
        at::Tensor same_w = c.all[r][kW63], scaled_p = c.all[r][kP63] / kLambda63;
        CHECK(PassesPkb(same_w, c.truth[r][own]));
        CHECK(PassesPkb(scaled_p, c.truth[r][p0]));
        CHECK_FALSE(Passes(c, own, same_w, c.truth[r][own]));
        CHECK_FALSE(Passes(c, p0, scaled_p, c.truth[r][p0]));
      }
      // lambda_next: 0.980026 exactly as (nue * lambda + 1) - nue in fp64; lambda itself fails.
      const at::Tensor& lam = c.truth[0].back();
      CHECK(std::abs(lam.item<double>() - 0.980026) < 1e-12);
      CHECK_FALSE(Passes(c, 8 * w + 8, at::scalar_tensor(kLambda63, at::kDouble), lam));
    }
  }
}

TEST_CASE("p063 the default block is PKB's 1024, M below 1024 shrinks it, meta draw works",
          "[p063]") {
  auto p = FindProblem(63);
  REQUIRE(p.ok());
  RunConfig cfg;
  cfg.world = 8;
  cfg.device = at::Device(at::kMeta);
  Inputs in = (*p)->MakeInputs(cfg, 3, 0);
  REQUIRE(in.tensors.size() == 25);
  CHECK(in[0].sizes() == at::IntArrayRef({1024, 1}));
  CHECK(in[kP63].sizes() == at::IntArrayRef({1024, 1024}));
  CHECK(in[kErr63].dim() == 0);
  CHECK(in[kErr63].scalar_type() == at::kDouble);
  CHECK((*p)->Outputs(cfg, 3).size() == 8 * 8 + 9);
  CheckMetaDraw(63, 64, 64, 2, 0);
  CheckMetaDraw(63, 64, 64, 2, 1);
  // Set 1's covariances are symmetric positive definite, not the identity.
  cfg.device = at::kCPU;
  cfg.m = 64;
  Inputs strong = (*p)->MakeInputs(cfg, 0, 1);
  at::Tensor p0 = strong[kP63];
  CHECK_FALSE(at::allclose(p0, at::eye(64, at::kDouble)));
  CHECK(at::linalg_eigvalsh(p0).min().item<double>() >= 1.0 - 1e-9);
}

}  // namespace
}  // namespace pkb::hazards
