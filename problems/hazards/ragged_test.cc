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

// Rank `rank`'s outputs as a candidate leaves them: every buffer at its declared capacity,
// poisoned, with `outs[i]`'s rows written at the front, counts as given.
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

// --- 67_gnn_sparse_embedding_all2all ---------------------------------------------------------

// How many rows rank `dst` receives from each source.
std::vector<int64_t> RowsFrom67(const Case& c, int dst) {
  std::vector<int64_t> n;
  for (const Inputs& in : c.all) {
    n.push_back(in[0].remainder(c.cfg.world).eq(dst).sum().item<int64_t>());
  }
  return n;
}

TEST_CASE("p067 rows past the count are ignored; a wrong count fails", "[p067][ragged]") {
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

TEST_CASE("p067 a source rank's rows missing fails, with or without the count adjusted",
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

TEST_CASE("p067 rows out of source order fail: an unstable owner sort, or sorted indices",
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
    // Every row kept with its index, but ordered by index (an unstable sort's typical output).
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

}  // namespace
}  // namespace pkb::hazards
