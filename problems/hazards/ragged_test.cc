// Hazard tests of the problems whose outputs have a data-dependent length, rows received by an
// all-to-all-v (see hazards.h). A candidate writes its row count into a count output and its
// rows into buffers at the declared capacity; these tests build such buffers from the oracle's
// rows and hold them to the harness's CompareOutputs, so that a wrong count, a source rank's rows
// missing, or rows in another order fail, while whatever lies past the count is ignored.
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "problems/hazards/hazards.h"

namespace pkb::hazards {
namespace {

// Rank `rank`'s outputs as a candidate leaves them: every buffer at its
// declared capacity, poisoned, with `outs[i]`'s rows written at the front,
// counts as given.
std::vector<at::Tensor> AtCapacity(const Case& c, int rank, const std::vector<at::Tensor>& outs) {
  std::vector<OutputDecl> decls = c.p->Outputs(c.cfg, rank);
  REQUIRE(decls.size() == outs.size());
  std::vector<at::Tensor> buf;
  for (size_t i = 0; i < decls.size(); ++i) {
    at::Tensor t = at::empty(decls[i].shape, at::TensorOptions().dtype(decls[i].dtype));
    Poison(t);
    if (decls[i].rows_from >= 0) {
      REQUIRE(outs[i].size(0) <= t.size(0));
      t.narrow(0, 0, outs[i].size(0)).copy_(outs[i]);
    } else {
      t.copy_(outs[i]);
    }
    buf.push_back(t);
  }
  return buf;
}

// Whether every output of rank `rank` passes.
bool PassesAll(const Case& c, int rank, const std::vector<at::Tensor>& outs) {
  auto checks = CompareOutputs(*c.p, c.cfg, c.p->Outputs(c.cfg, rank), AtCapacity(c, rank, outs),
                               c.truth[rank]);
  REQUIRE(checks.ok());
  for (const auto& k : *checks) {
    if (!k.ok()) return false;
  }
  return true;
}

at::Tensor Count(int64_t n) { return at::scalar_tensor(n, at::kLong); }

// --- 67_gnn_sparse_embedding_all2all
// ---------------------------------------------------------

// How many rows rank `dst` receives from each source.
std::vector<int64_t> RowsFrom67(const Case& c, int dst) {
  std::vector<int64_t> n;
  for (const Inputs& in : c.all) {
    n.push_back(in[0].remainder(c.cfg.world).eq(dst).sum().item<int64_t>());
  }
  return n;
}

TEST_CASE("p067 rows past the count are ignored, a wrong count fails", "[p067][ragged]") {
  Case c = Prepare(67, 64, 64, 4);
  for (int r = 0; r < 4; ++r) {
    const auto& t = c.truth[r];
    const int64_t rows = t[2].item<int64_t>();
    CHECK(rows == t[0].size(0));
    CHECK(PassesAll(c, r, t));  // poison past row R
    // One row short, with the count saying so, and one row too many.
    CHECK_FALSE(PassesAll(
        c, r, {t[0].narrow(0, 0, rows - 1), t[1].narrow(0, 0, rows - 1), Count(rows - 1)}));
    CHECK_FALSE(PassesAll(c, r,
                          {at::cat({t[0], t[0].narrow(0, 0, 1)}),
                           at::cat({t[1], t[1].narrow(0, 0, 1)}), Count(rows + 1)}));
    CHECK_FALSE(PassesAll(c, r, {t[0], t[1], Count(rows + 1)}));
  }
}

TEST_CASE(
    "p067 a source rank's rows missing fails, with or without the count "
    "adjusted",
    "[p067][ragged]") {
  Case c = Prepare(67, 64, 64, 4);
  for (int r = 0; r < 4; ++r) {
    const auto& t = c.truth[r];
    std::vector<int64_t> from = RowsFrom67(c, r);
    int64_t begin = 0;
    for (int s = 0; s < 4; ++s) {
      INFO("rank " << r << " source " << s);
      REQUIRE(from[s] > 0);
      auto keep = [&](const at::Tensor& x) {
        return at::cat(
            {x.narrow(0, 0, begin), x.narrow(0, begin + from[s], x.size(0) - begin - from[s])});
      };
      CHECK_FALSE(PassesAll(c, r, {keep(t[0]), keep(t[1]), Count(t[0].size(0) - from[s])}));
      at::Tensor idx = t[0].clone(), value = t[1].clone();
      idx.narrow(0, begin, from[s]).zero_();
      value.narrow(0, begin, from[s]).zero_();
      CHECK_FALSE(PassesAll(c, r, {idx, value, t[2]}));
      begin += from[s];
    }
    CHECK(begin == t[0].size(0));
  }
}

TEST_CASE(
    "p067 rows out of source order fail: an unstable owner sort, or "
    "sorted indices",
    "[p067][ragged]") {
  Case c = Prepare(67, 64, 64, 4);
  for (int r = 0; r < 4; ++r) {
    const auto& t = c.truth[r];
    // Source blocks in reverse order.
    std::vector<int64_t> from = RowsFrom67(c, r);
    std::vector<at::Tensor> idx_blocks, value_blocks;
    for (int s = 3, end = static_cast<int>(t[0].size(0)); s >= 0; --s) {
      end -= static_cast<int>(from[s]);
      idx_blocks.push_back(t[0].narrow(0, end, from[s]));
      value_blocks.push_back(t[1].narrow(0, end, from[s]));
    }
    CHECK_FALSE(PassesAll(c, r, {at::cat(idx_blocks), at::cat(value_blocks), t[2]}));
    // Every row kept with its index, but ordered by index (an unstable sort's
    // typical output).
    at::Tensor order = std::get<1>(t[0].sort());
    CHECK_FALSE(PassesAll(c, r, {t[0].index_select(0, order), t[1].index_select(0, order), t[2]}));
  }
}

TEST_CASE("p067 the capacity W*nnz is reached when every index has one owner", "[p067][ragged]") {
  Case c = Prepare(67, 64, 64, 4);
  for (auto& in : c.all) in.tensors[0] = in[0] - in[0].remainder(4);  // all owned by rank 0
  auto o = c.p->Oracle(c.all, c.cfg);
  REQUIRE(o.ok());
  CHECK((*o)[0][0].size(0) == c.p->Outputs(c.cfg, 0)[0].shape[0]);
  for (int r = 0; r < 4; ++r) CHECK(CheckAgainstDeclaration(c.p->Outputs(c.cfg, r), (*o)[r]).ok());
  CHECK((*o)[1][0].size(0) == 0);
}

// --- 70_torchrec_kjt_all2all
// -----------------------------------------------------------------

TEST_CASE(
    "p070 the feature-major reorder is required where a rank owns two or "
    "more features",
    "[p070][ragged]") {
  Case c = Prepare(70, 64, 64, 4);  // ks = 1, 2, 3, 1
  const int64_t b = 512, w = 4;
  const std::vector<int64_t> ks = {1, 2, 3, 1};
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    const auto& t = c.truth[r];
    CHECK(PassesAll(c, r, t));
    CHECK(t[0].size(0) == ks[r] * w * b);
    // The exchange's own [source][feature][b] order, lengths and values alike.
    at::Tensor lengths = t[0].view({ks[r], w, b}).transpose(0, 1).reshape({-1});
    std::vector<int64_t> seg = [&] {
      at::Tensor s = t[0].view({ks[r] * w, b}).sum(1);
      return std::vector<int64_t>(s.data_ptr<int64_t>(), s.data_ptr<int64_t>() + s.numel());
    }();
    std::vector<int64_t> start{0};
    for (int64_t n : seg) start.push_back(start.back() + n);
    std::vector<at::Tensor> runs;
    for (int64_t s = 0; s < w; ++s) {
      for (int64_t f = 0; f < ks[r]; ++f) {
        int64_t k = f * w + s;
        runs.push_back(t[1].narrow(0, start[k], seg[k]));
      }
    }
    at::Tensor values = at::cat(runs);
    if (ks[r] == 1) {
      CHECK(Same(lengths, t[0]));  // one feature: the reorder is the identity
      CHECK(Same(values, t[1]));
    } else {
      CHECK_FALSE(PassesAll(c, r, {lengths, values, t[2], t[3], t[4]}));
      CHECK_FALSE(PassesAll(c, r, {t[0], values, t[2], t[3], t[4]}));   // lengths only reordered
      CHECK_FALSE(PassesAll(c, r, {lengths, t[1], t[2], t[3], t[4]}));  // values only
    }
  }
}

TEST_CASE("p070 a wrong value count or a source rank's segments missing fail", "[p070][ragged]") {
  Case c = Prepare(70, 64, 64, 4);
  const int64_t b = 512, w = 4;
  const std::vector<int64_t> ks = {1, 2, 3, 1};
  for (int r = 0; r < 4; ++r) {
    const auto& t = c.truth[r];
    const int64_t v = t[4].item<int64_t>();
    CHECK_FALSE(PassesAll(c, r, {t[0], t[1].narrow(0, 0, v - 1), t[2], t[3], Count(v - 1)}));
    CHECK_FALSE(PassesAll(c, r, {t[0], t[1], t[2], t[3], Count(v + 1)}));
    // Source 2's segments dropped from the values (count adjusted), its lengths
    // zeroed.
    at::Tensor lengths = t[0].view({ks[r], w, b}).clone();
    at::Tensor seg = t[0].view({ks[r] * w, b}).sum(1);
    std::vector<at::Tensor> runs;
    for (int64_t k = 0, pos = 0; k < ks[r] * w; ++k) {
      const int64_t n = seg[k].item<int64_t>();
      if (k % w != 2) runs.push_back(t[1].narrow(0, pos, n));
      pos += n;
    }
    lengths.select(1, 2).zero_();
    at::Tensor values = at::cat(runs);
    CHECK_FALSE(PassesAll(c, r, {t[0], values, t[2], t[3], Count(values.size(0))}));
    CHECK_FALSE(
        PassesAll(c, r, {lengths.reshape({-1}), values, t[2], t[3], Count(values.size(0))}));
  }
}

TEST_CASE("p070 the values capacity 20*ks[r]*W*B holds when every length is 20", "[p070][ragged]") {
  Case c = Prepare(70, 64, 64, 4);
  for (auto& in : c.all) {
    in.tensors[0] = at::full_like(in[0], 20);
    in.tensors[1] = at::randint(0, 1000000, {in[0].sum().item<int64_t>()}, in[1].options());
  }
  auto o = c.p->Oracle(c.all, c.cfg);
  REQUIRE(o.ok());
  for (int r = 0; r < 4; ++r) {
    auto decls = c.p->Outputs(c.cfg, r);
    CHECK((*o)[r][1].size(0) == decls[1].shape[0]);
    CHECK(CheckAgainstDeclaration(decls, (*o)[r]).ok());
  }
}

// --- 64_gnn_neighbor_sampling
// ----------------------------------------------------------------

// The catalog's closed form of set 0 without wrap-around (W*S + 15 <= Nn), base
// a = r*S.
std::vector<at::Tensor> ClosedForm64(int64_t r, int64_t s) {
  auto longs = at::TensorOptions().dtype(at::kLong);
  const int64_t a = r * s;
  std::vector<int64_t> row, col, edge;
  for (int64_t i = 0; i < s; ++i) {
    for (int64_t j = 0; j < 10; ++j) {
      row.push_back(i + 1 + j);
      col.push_back(i);
      edge.push_back(16 * (a + i) + j);
    }
  }
  for (int64_t i = 0; i < 10; ++i) {
    for (int64_t j = 0; j < 5; ++j) {
      row.push_back(s + i + 1 + j);
      col.push_back(s + i);
      edge.push_back(16 * (a + s + i) + j);
    }
  }
  return {at::arange(a, a + s + 15, longs), at::tensor(row, longs), at::tensor(col, longs),
          at::tensor(edge, longs),          Count(s + 15),          Count(10 * s + 50)};
}

TEST_CASE("p064 the oracle agrees with the closed form of PKB's inputs (set 0)", "[p064][ragged]") {
  for (int w : {1, 2, 4, 8}) {
    Case c = Prepare(64, 64, 64, w);  // Nn = 10000, S = 512: no wrap-around
    for (int r = 0; r < w; ++r) {
      INFO("W " << w << " rank " << r);
      auto want = ClosedForm64(r, 512);
      for (size_t i = 0; i < want.size(); ++i) CHECK(Same(c.truth[r][i], want[i]));
      CHECK(PassesAll(c, r, want));
    }
  }
}

TEST_CASE(
    "p064 the stronger sets defeat the closed form and exercise short "
    "and empty degrees",
    "[p064][ragged]") {
  for (int set : {1, 2}) {
    Case c = Prepare(64, 64, 64, 4, set);
    for (int r = 0; r < 4; ++r) {
      INFO("set " << set << " rank " << r);
      CHECK_FALSE(PassesAll(c, r, ClosedForm64(r, 512)));
      CHECK(CheckAgainstDeclaration(c.p->Outputs(c.cfg, r), c.truth[r]).ok());
    }
    at::Tensor degree = c.all[0][1].diff();
    CHECK(degree.eq(0).any().item<bool>());
    CHECK(degree.lt(10).logical_and(degree.gt(0)).any().item<bool>());
    // Owners are not v mod W, so a candidate that ignores node_to_rank is
    // caught.
    CHECK_FALSE(c.all[0][3].equal(at::arange(c.all[0][3].numel(), at::kLong).remainder(4)));
  }
}

TEST_CASE(
    "p064 a wrong count, one owner's replies missing, or U in sorted "
    "order fail",
    "[p064][ragged]") {
  Case c = Prepare(64, 64, 64, 4, 1);
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    const auto& t = c.truth[r];
    const int64_t nu = t[4].item<int64_t>(), ne = t[5].item<int64_t>();
    CHECK(PassesAll(c, r, t));
    CHECK_FALSE(PassesAll(c, r, {t[0], t[1], t[2], t[3], t[4], Count(ne - 1)}));
    CHECK_FALSE(
        PassesAll(c, r, {t[0].narrow(0, 0, nu - 1), t[1], t[2], t[3], Count(nu - 1), t[5]}));
    // Edges sampled by owner 1 dropped (their sampling node, col, is owned by
    // rank 1).
    at::Tensor owner = c.all[r][3].index_select(0, t[0].index_select(0, t[2]));
    at::Tensor keep = owner.ne(1).nonzero().reshape({-1});
    REQUIRE(keep.numel() < ne);
    CHECK_FALSE(PassesAll(c, r,
                          {t[0], t[1].index_select(0, keep), t[2].index_select(0, keep),
                           t[3].index_select(0, keep), t[4], Count(keep.numel())}));
    // U sorted (np.unique without return_index), row and col relabelled to
    // match.
    at::Tensor sorted = std::get<0>(t[0].sort());
    at::Tensor rank_of = at::empty_like(t[0]);
    rank_of.index_put_({std::get<1>(t[0].sort())}, at::arange(nu, at::kLong));
    CHECK_FALSE(PassesAll(
        c, r,
        {sorted, rank_of.index_select(0, t[1]), rank_of.index_select(0, t[2]), t[3], t[4], t[5]}));
  }
}

// --- 61_gsplat_3d_gaussian_splatting
// ---------------------------------------------------------

// Every rank's floating inputs in `t`: the oracle then computes as a candidate
// in fp32 would.
std::vector<std::vector<at::Tensor>> InPrecision(const Case& c, at::ScalarType t) {
  std::vector<Inputs> all = c.all;
  for (auto& in : all) {
    for (auto& x : in.tensors) {
      if (x.is_floating_point()) x = x.to(t);
    }
  }
  auto o = c.p->Oracle(all, c.cfg);
  REQUIRE(o.ok());
  for (auto& outs : *o) {
    for (auto& x : outs) {
      if (x.is_floating_point()) x = x.to(at::kBFloat16);
    }
  }
  return *o;
}

TEST_CASE("p061 fp32 and fp64 implementations pass and see the same visible pairs",
          "[p061][ragged]") {
  for (auto shape : {std::pair<int64_t, int64_t>{64, 64}, {1024, 1024}}) {
    for (int set : {0, 1, 2, 3}) {
      Case c = Prepare(61, shape.first, shape.second, 8, set);
      const int64_t n = c.all[0][0].size(0);
      for (auto t : {at::kFloat, at::kDouble}) {
        auto hi = InPrecision(c, t);
        for (int r = 0; r < 8; ++r) {
          INFO("M " << shape.first << " set " << set << " dtype " << t << " rank " << r);
          const int64_t rows = c.truth[r][8].item<int64_t>();
          CHECK(hi[r][8].item<int64_t>() == rows);
          CHECK(PassesAll(c, r, hi[r]));
          if (set == 0) {
            CHECK(rows == 8 * n);  // PKB's inputs: every Gaussian visible in every camera
          } else {
            CHECK(rows < 8 * n);
          }
        }
      }
    }
  }
}

TEST_CASE("p061 a wrong count, a source's rows missing and the standard slips fail",
          "[p061][ragged]") {
  Case c = Prepare(61, 1024, 1024, 4, 1);  // 64 x 64 images make every conic near-isotropic
  const int64_t n = c.all[0][0].size(0);
  for (int s = 0; s < 4; ++s) {  // source s's Gaussians all behind: its rows are missing
    std::vector<Inputs> dropped = c.all;
    dropped[s].tensors[0] = dropped[s][0].clone();
    dropped[s].tensors[0].select(1, 2).fill_(-2.0);
    auto o = c.p->Oracle(dropped, c.cfg);
    REQUIRE(o.ok());
    for (int r = 0; r < 4; ++r) {
      INFO("source " << s << " rank " << r);
      REQUIRE((*o)[r][8].item<int64_t>() < c.truth[r][8].item<int64_t>());
      CHECK_FALSE(PassesAll(c, r, (*o)[r]));
    }
  }
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    const auto& t = c.truth[r];
    const int64_t rows = t[8].item<int64_t>();
    CHECK(PassesAll(c, r, t));
    std::vector<at::Tensor> shorter;
    for (int i = 0; i < 8; ++i) shorter.push_back(t[i].narrow(0, 0, rows - 1));
    shorter.push_back(Count(rows - 1));
    CHECK_FALSE(PassesAll(c, r, shorter));
    auto with = [&](int i, const at::Tensor& x) {
      std::vector<at::Tensor> v = t;
      v[i] = x;
      return v;
    };
    CHECK_FALSE(PassesAll(c, r, with(8, Count(rows + 1))));
    if (r > 0) CHECK_FALSE(PassesAll(c, r, with(1, t[1] - r * n)));  // no destination offset
    CHECK(PassesAll(c, r, with(2, t[2] + 1)));  // radii within 1, as documented
    CHECK_FALSE(PassesAll(c, r, with(2, t[2] + 2)));
    at::Tensor conics = t[5].clone();
    conics.select(1, 1).mul_(2);  // the off-diagonal without its /2
    CHECK_FALSE(PassesAll(c, r, with(5, conics)));
    CHECK_FALSE(PassesAll(c, r, with(5, t[5].flip(1))));  // (S00, ., S11) / det order
    at::Tensor means2d = t[3].flip(1);                    // x and y swapped
    CHECK_FALSE(PassesAll(c, r, with(3, means2d)));
  }
}

}  // namespace
}  // namespace pkb::hazards
