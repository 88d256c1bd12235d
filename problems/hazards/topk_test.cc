// Hazard tests of the top-k / top-p log-prob problems 82-84 (see hazards.h): PKB's weak set 0,
// the bf16 top-p decision, tie order, and 83/84's chunk order.
#include <limits>
#include <string>

#include "problems/hazards/hazards.h"
#include "problems/hazards/ties.h"
#include "problems/tp/topk_filter.h"

namespace pkb::hazards {
namespace {

constexpr int64_t kHazardM = 4096;  // Bt = 4, S = 32: 128 tokens a set
constexpr int kStrongSets = 6;      // sets 1..6

bool Runnable(int id, int world) {
  auto p = FindProblem(id);
  REQUIRE(p.ok());
  RunConfig cfg;
  cfg.world = world;
  return (*p)->CanImplement(cfg).ok();
}

// Ways to make the top-p decision. kExactCumsum and kSequential stand for any order of summing
// the bf16 prefix (rounded once, or every partial sum rounded); the others are mistakes.
enum class Decision {
  kPkb,                // the reference's own filter
  kExactCumsum,        // fp64 prefix of the dtype probabilities, rounded to the dtype once
  kSequential,         // running sum in the dtype, every partial rounded
  kFp32,               // fp32 probabilities and prefix sums, never rounded to the dtype
  kUnroundedThreshold  // dtype prefix sums compared with the double 0.0999... (not dtype(0.1))
};

// The filter with one variation; `reversed_ties` orders equal logits by descending vocab index
// (an unstable or descending-then-flipped sort).
topk::Filtered FilterWith(const at::Tensor& rows, Decision d, bool reversed_ties = false) {
  if (d == Decision::kPkb && !reversed_ties) return topk::ApplyTopKTopP(rows, topk::kTopK, 0.9);
  const double inf = std::numeric_limits<double>::infinity(), cut = 1.0 - topk::kTopP;
  const int64_t v = rows.size(-1);
  auto [sorted, idx] = rows.sort(/*stable=*/true, -1, /*descending=*/false);
  if (reversed_ties) {
    auto [s, i] = rows.sort(/*stable=*/true, -1, /*descending=*/true);
    sorted = s.flip(-1);
    idx = i.flip(-1);
  }
  at::Tensor top_k_mask = sorted.ge(sorted.narrow(-1, v - topk::kTopK, 1));
  sorted = sorted.masked_fill(top_k_mask.logical_not(), -inf);
  at::Tensor keep;
  switch (d) {
    case Decision::kPkb:
      keep = at::cumsum(sorted.softmax(-1), -1).gt(cut);
      break;
    case Decision::kExactCumsum:
      keep = at::cumsum(sorted.softmax(-1).to(at::kDouble), -1).to(rows.scalar_type()).gt(cut);
      break;
    case Decision::kSequential: {
      at::Tensor p = sorted.softmax(-1), c = at::empty_like(p),
                 acc = at::zeros_like(p.select(-1, 0));
      for (int64_t j = 0; j < v; ++j) {
        acc = acc + p.select(-1, j);  // rounds to the dtype
        c.select(-1, j).copy_(acc);
      }
      keep = c.gt(cut);
      break;
    }
    case Decision::kFp32:
      keep = at::cumsum(sorted.to(at::kFloat).softmax(-1), -1).gt(cut);
      break;
    case Decision::kUnroundedThreshold:
      keep = at::cumsum(sorted.softmax(-1), -1).to(at::kDouble).gt(cut);
      break;
  }
  keep.select(-1, v - 1).fill_(true);
  sorted = sorted.masked_fill(keep.logical_not(), -inf);
  keep = keep.logical_and(top_k_mask);
  return {sorted.scatter(-1, idx, sorted), keep.scatter(-1, idx, keep)};
}

// 82/83's output from every token's full row, with the given filter.
at::Tensor LogProbs(const Case& c, Decision d, bool reversed_ties = false) {
  const topk::Sizes s = topk::SizesOf(c.cfg);
  at::Tensor rows = topk::FullRows(c.all, 0, s.tokens);
  at::Tensor f = FilterWith(rows, d, reversed_ties).logits.to(at::kFloat);
  at::Tensor target = c.all[0][1].reshape({-1, 1});
  return at::log_softmax(f, -1).gather(-1, target).reshape({s.batch, s.seq});
}

// --- 82_vocab_parallel_log_prob_topk ------------------------------------------------------

TEST_CASE("p082 needs W | 256", "[p082]") {
  for (int w : {1, 2, 4, 8, 16}) CHECK(Runnable(82, w));
  for (int w : {3, 5, 6, 7, 12}) CHECK_FALSE(Runnable(82, w));
}

// PKB's inputs leave almost every token with only its target (output exactly 0): all zeros
// pass set 0 at PKB's default shape, and fail every stronger set.
TEST_CASE("p082 all zeros pass PKB's set 0 and fail the stronger sets", "[p082]") {
  for (int w : {1, 2, 4, 8}) {
    INFO("W = " << w);
    Case c0 = Prepare(82, 1024, 1024, w, 0);
    const at::Tensor& want0 = c0.truth[0][0];
    CHECK(want0.eq(0).to(at::kFloat).mean().item<double>() >= 0.8);
    for (int set = 1; set <= 3; ++set) {
      INFO("set " << set);
      Case c = Prepare(82, 1024, 1024, w, set);
      const at::Tensor& want = c.truth[0][0];
      CHECK(want.ne(0).all().item<bool>());
      CHECK_FALSE(Passes(c, 0, at::zeros_like(want), want));
    }
  }
  Case c = Prepare(82, 1024, 1024, 8, 0);
  CHECK(Passes(c, 0, at::zeros_like(c.truth[0][0]), c.truth[0][0]));
}

// Rows built to sweep the top-p boundary: logits clamp(0.1 randn, +-0.45) with the target (column
// 0) at 1.5 .. 3.5, so the prefix that crosses 1 - top_p passes through it on many rows.
at::Tensor BorderlineRows(int64_t n) {
  at::manual_seed(8284);
  at::TensorOptions bf16 = at::TensorOptions().dtype(at::kBFloat16);
  at::Tensor rows = (at::randn({n, topk::kVocab}, bf16) * 0.1).clamp(-0.45, 0.45);
  rows.select(-1, 0).copy_(at::linspace(1.5, 3.5, n, bf16));
  return rows;
}

// The bf16 decision is the spec: where an fp32 decision or the unrounded 0.0999... threshold
// keeps another set of tokens, the output moves beyond the tolerance. Summing the bf16 prefix in
// fp64 and rounding once keeps the CPU kernel's set; rounding every partial sum (as the CUDA
// kernel does, in its own order) flips rows whose borderline prefix has three or more terms,
// which is why the stronger sets keep every such prefix away from the threshold.
TEST_CASE("p082 a flipped top-p decision fails the tolerance", "[p082]") {
  Case c = Prepare(82, 1024, 64, 1, 1);  // for its tolerance
  at::Tensor rows = BorderlineRows(4096);
  at::Tensor target = at::zeros({rows.size(0)}, at::kLong);
  auto log_probs = [&](const topk::Filtered& f) {
    return at::log_softmax(f.logits.to(at::kFloat), -1).select(-1, 0);
  };
  topk::Filtered pkb = FilterWith(rows, Decision::kPkb);
  at::Tensor want = log_probs(pkb);
  CHECK(at::equal(want, topk::TargetLogProbs(rows, target)));
  CHECK(Passes(c, 0, log_probs(FilterWith(rows, Decision::kExactCumsum)), want));
  for (Decision d : {Decision::kSequential, Decision::kFp32, Decision::kUnroundedThreshold}) {
    INFO("decision " << static_cast<int>(d));
    topk::Filtered f = FilterWith(rows, d);
    at::Tensor flipped = f.keep.ne(pkb.keep).any(-1);
    CHECK(flipped.sum().item<int64_t>() > 0);
    at::Tensor got = log_probs(f);
    for (int64_t i = 0; i < rows.size(0); ++i) {
      if (!flipped[i].item<bool>()) continue;
      CHECK_FALSE(Passes(c, 0, got.narrow(0, i, 1), want.narrow(0, i, 1)));
    }
  }
}

// On the stronger sets PKB's filter is what any order of summing the bf16 prefix gives (no
// prefix of three or more terms comes near the threshold), and tie order does not change 82's
// output (tied tokens have equal probabilities).
TEST_CASE("p082 the stronger sets are safe for any bf16 summation order", "[p082]") {
  for (int set = 0; set <= kStrongSets; ++set) {
    INFO("set " << set);
    Case c = Prepare(82, kHazardM, 64, 8, set);
    const at::Tensor& want = c.truth[0][0];
    CHECK(Passes(c, 0, LogProbs(c, Decision::kExactCumsum), want));
    CHECK(Passes(c, 0, LogProbs(c, Decision::kPkb, /*reversed_ties=*/true), want));
    if (set == 0) continue;
    CHECK(Passes(c, 0, LogProbs(c, Decision::kSequential), want));
    auto sorted = std::get<0>(topk::FullRows(c.all, 0, want.numel()).sort(true, -1, false));
    at::Tensor dropped = sorted.lt(sorted.narrow(-1, topk::kVocab - topk::kTopK, 1));
    at::Tensor p = sorted.masked_fill(dropped, -std::numeric_limits<double>::infinity())
                       .softmax(-1)
                       .to(at::kDouble);
    at::Tensor third = dropped.sum(-1, true) + 2;
    CHECK(at::cumsum(p, -1).gather(-1, third).min().item<double>() > 0.12);
  }
}

// --- 83_vocab_parallel_log_prob_topk_chunked ----------------------------------------------

TEST_CASE("p083 chunk_size is PKB's and W | 256 is required", "[p083]") {
  const int64_t want[] = {2, 2, 4, 8};
  int i = 0;
  for (int w : {1, 2, 4, 8}) {
    Case c = Prepare(83, 1024, 1024, w);
    auto cs = c.all[0].scalars.back();
    CHECK(cs.name == "chunk_size");
    CHECK(cs.i == want[i++]);
  }
  for (int w : {3, 6, 12}) CHECK_FALSE(Runnable(83, w));
}

// 83's output built piece by piece, as each rank computes its block of each piece; `rank_major`
// concatenates rank 0's results of every piece first (a wrong all-gather layout).
at::Tensor Chunked83(const Case& c, bool rank_major) {
  const topk::Sizes s = topk::SizesOf(c.cfg);
  const int64_t w = c.cfg.world, piece = s.batch * topk::ChunkSize(c.cfg);
  at::Tensor target = c.all[0][1].reshape({-1});
  std::vector<std::vector<at::Tensor>> by_rank(w);
  std::vector<at::Tensor> in_order;
  for (int64_t start = 0; start < s.tokens; start += piece) {
    const int64_t pl = std::min(piece, s.tokens - start) / w;
    for (int64_t j = 0; j < w; ++j) {
      const int64_t first = start + j * pl;
      at::Tensor lp =
          topk::TargetLogProbs(topk::FullRows(c.all, first, pl), target.narrow(0, first, pl));
      by_rank[j].push_back(lp);
      in_order.push_back(lp);
    }
  }
  if (rank_major) {
    in_order.clear();
    for (const auto& pieces : by_rank)
      in_order.insert(in_order.end(), pieces.begin(), pieces.end());
  }
  return at::cat(in_order).reshape({s.batch, s.seq});
}

// M = 2560: 3 or 4 pieces at W = 2, 4, 8, the last one shorter at W = 2 and 4.
TEST_CASE("p083 pieces in chunk order pass, a rank-major gather fails", "[p083]") {
  for (int w : {2, 4, 8}) {
    for (int set : {0, 1}) {
      INFO("W = " << w << ", set " << set);
      Case c = Prepare(83, 2560, 64, w, set);
      CHECK(topk::SizesOf(c.cfg).seq > topk::ChunkSize(c.cfg));
      const at::Tensor& want = c.truth[0][0];
      CHECK(Passes(c, 0, Chunked83(c, false), want));
      if (set > 0) CHECK_FALSE(Passes(c, 0, Chunked83(c, true), want));
    }
  }
}

TEST_CASE("p083 any bf16 summation order passes the stronger sets, zeros fail them", "[p083]") {
  for (int set = 0; set <= kStrongSets; ++set) {
    INFO("set " << set);
    Case c = Prepare(83, kHazardM, 64, 4, set);
    const at::Tensor& want = c.truth[0][0];
    CHECK(Passes(c, 0, LogProbs(c, Decision::kExactCumsum), want));
    if (set == 0) continue;
    CHECK(Passes(c, 0, LogProbs(c, Decision::kSequential), want));
    CHECK_FALSE(Passes(c, 0, at::zeros_like(want), want));
  }
}

// --- 84_vocab_parallel_log_prob_topk_chunked_backward -------------------------------------

// Every token's gradient row (T, V) with the given filter.
at::Tensor Grad84(const Case& c, Decision d, bool reversed_ties = false) {
  const topk::Sizes s = topk::SizesOf(c.cfg);
  topk::Filtered f = FilterWith(topk::FullRows(c.all, 0, s.tokens), d, reversed_ties);
  at::Tensor p = at::softmax(f.logits.to(at::kFloat), -1);
  at::Tensor onehot = at::zeros_like(p).scatter_(-1, c.all[0][1].reshape({-1, 1}), 1.0);
  return (onehot - p) * c.all[0][2].reshape({-1, 1}).to(at::kFloat) * f.keep;
}

at::Tensor Shard(const Case& c, const at::Tensor& full, int r) {
  const topk::Sizes s = topk::SizesOf(c.cfg);
  return full.narrow(1, r * s.local_vocab, s.local_vocab)
      .contiguous()
      .reshape({s.batch, s.seq, s.local_vocab});
}

// Rank r's rows, built piece by piece; `interleaved` packs a piece's rows as (Pl, W) instead
// of (W, Pl) (a wrong permute before the all-to-all back).
at::Tensor Chunked84(const Case& c, const at::Tensor& full, int r, bool interleaved) {
  const topk::Sizes s = topk::SizesOf(c.cfg);
  const int64_t w = c.cfg.world, piece = s.batch * topk::ChunkSize(c.cfg);
  at::Tensor mine = full.narrow(1, r * s.local_vocab, s.local_vocab);
  std::vector<at::Tensor> rows;
  for (int64_t start = 0; start < s.tokens; start += piece) {
    const int64_t p = std::min(piece, s.tokens - start), pl = p / w;
    at::Tensor block = mine.narrow(0, start, p);
    if (interleaved) block = block.reshape({w, pl, -1}).transpose(0, 1).reshape({p, -1});
    rows.push_back(block);
  }
  return at::cat(rows).reshape({s.batch, s.seq, s.local_vocab});
}

TEST_CASE("p084 rows in chunk order pass, an interleaved all-to-all back fails", "[p084]") {
  for (int w : {2, 4, 8}) {
    INFO("W = " << w);
    Case c = Prepare(84, 2560, 64, w, 1);
    at::Tensor full = Grad84(c, Decision::kPkb);
    for (int r : {0, w - 1}) {
      CHECK(Passes(c, 0, Chunked84(c, full, r, false), c.truth[r][0]));
      CHECK_FALSE(Passes(c, 0, Chunked84(c, full, r, true), c.truth[r][0]));
    }
  }
}

TEST_CASE("p084 any bf16 summation order passes and zeros fail", "[p084]") {
  for (int set = 0; set <= kStrongSets; ++set) {
    INFO("set " << set);
    Case c = Prepare(84, kHazardM, 64, 8, set);
    at::Tensor exact = Grad84(c, Decision::kExactCumsum), seq = Grad84(c, Decision::kSequential);
    for (int r = 0; r < c.cfg.world; ++r) {
      const at::Tensor& want = c.truth[r][0];
      CHECK(Passes(c, 0, Shard(c, exact, r), want));
      if (set == 0) continue;
      CHECK(Passes(c, 0, Shard(c, seq, r), want));
      CHECK_FALSE(Passes(c, 0, at::zeros_like(want), want));
    }
  }
}

// Every token's gradient row (T, V) for a given keep mask over the full rows.
at::Tensor GradFromKeep(const Case& c, const at::Tensor& rows, const at::Tensor& keep) {
  const double inf = std::numeric_limits<double>::infinity();
  at::Tensor p = at::softmax(rows.to(at::kFloat).masked_fill(keep.logical_not(), -inf), -1);
  at::Tensor onehot = at::zeros_like(p).scatter_(-1, c.all[0][1].reshape({-1, 1}), 1.0);
  return (onehot - p) * c.all[0][2].reshape({-1, 1}).to(at::kFloat) * keep;
}

// The kept set decides every entry of a row, but where the top-p cut falls inside a run of
// equal logits, which members of the run are kept is the sort's choice: any choice of as many
// passes (reversed tie order, random members), keeping every member of the run or none of it
// fails.
TEST_CASE("p084 any members of a tie at the top-p cut pass and keeping more or fewer fails",
          "[p084]") {
  int sets_with_ties = 0;
  for (int w : {2, 8}) {
    for (int set = 0; set <= kStrongSets; ++set) {
      INFO("W = " << w << " set " << set);
      Case c = Prepare(84, kHazardM, 64, w, set);
      auto keys = OracleKeys(c);
      const topk::Sizes s = topk::SizesOf(c.cfg);
      at::Tensor rows = topk::FullRows(c.all, 0, s.tokens);
      at::Tensor keep = topk::ApplyTopKTopP(rows, topk::kTopK, topk::kTopP).keep;
      // The run at each row's cut, in rows where the filter kept only some of it.
      at::Tensor cut = rows.masked_fill(keep.logical_not(), std::numeric_limits<double>::infinity())
                           .amin(-1, true);
      at::Tensor run = rows.eq(cut);
      at::Tensor choice = run.sum(-1).gt(run.logical_and(keep).sum(-1)).unsqueeze(-1);
      at::Tensor free = run.logical_and(choice);
      const int64_t rows_with_choice = choice.sum().item<int64_t>();
      CHECK(Same(
          keys[0][0],
          free.narrow(1, 0, s.local_vocab).contiguous().reshape({s.batch, s.seq, s.local_vocab})));
      // Random members: per row with a choice, as many of the run as the filter kept.
      at::Tensor random_keep = keep.clone();
      at::manual_seed(1000 + set);
      for (int64_t t = 0; t < s.tokens; ++t) {
        if (!choice[t][0].item<bool>()) continue;
        at::Tensor members = free[t].nonzero().reshape({-1});
        const int64_t n = keep[t].logical_and(free[t]).sum().item<int64_t>();
        at::Tensor pick = members.index_select(0, at::randperm(members.numel(), at::kLong));
        random_keep[t].index_fill_(0, members, false);
        random_keep[t].index_fill_(0, pick.narrow(0, 0, n), true);
      }
      at::Tensor reversed = Grad84(c, Decision::kPkb, /*reversed_ties=*/true);
      at::Tensor random = GradFromKeep(c, rows, random_keep);
      at::Tensor every = GradFromKeep(c, rows, keep.logical_or(free));
      at::Tensor none = GradFromKeep(c, rows, keep.logical_and(free.logical_not()));
      CHECK(Same(GradFromKeep(c, rows, keep), Grad84(c, Decision::kPkb)));
      bool ties_matter = false, every_fails = false, none_fails = false;
      for (int r = 0; r < w; ++r) {
        INFO("rank " << r);
        const at::Tensor& want = c.truth[r][0];
        CHECK(PassesWithTies(c, keys, r, {Shard(c, reversed, r)}));
        CHECK(PassesWithTies(c, keys, r, {Shard(c, random, r)}));
        ties_matter = ties_matter || !Passes(c, 0, Shard(c, random, r), want) ||
                      !Passes(c, 0, Shard(c, reversed, r), want);
        every_fails = every_fails || !PassesWithTies(c, keys, r, {Shard(c, every, r)});
        none_fails = none_fails || !PassesWithTies(c, keys, r, {Shard(c, none, r)});
      }
      if (rows_with_choice > 0) {
        ++sets_with_ties;
        CHECK(every_fails);
        CHECK(none_fails);
      }
      if (rows_with_choice > 0) CHECK(ties_matter);
    }
  }
  CHECK(sets_with_ties >= 2);
}

TEST_CASE("p082 p083 p084 the target is every row's strict maximum on every input set",
          "[p082][p083][p084]") {
  for (int id : {82, 83, 84}) {
    for (int w : {1, 2, 8}) {
      for (int set = 0; set <= kStrongSets; ++set) {
        INFO("problem " << id << " W = " << w << " set " << set);
        Case c = Prepare(id, kHazardM, 64, w, set);
        const topk::Sizes s = topk::SizesOf(c.cfg);
        at::Tensor rows = topk::FullRows(c.all, 0, s.tokens);
        at::Tensor target = rows.gather(-1, c.all[0][1].reshape({-1, 1}));
        // Exactly one entry of each row reaches the target's value: the target.
        CHECK(rows.ge(target).sum(-1).eq(1).all().item<bool>());
      }
    }
  }
}

}  // namespace
}  // namespace pkb::hazards
