// Problem 67 — DGL's sparse_all_to_all_push with remainder partitioning: every (index, row) pair
// goes to the rank that owns the index (index mod W); the number of rows a rank receives depends
// on the data, so the candidate writes it to a count output.
#include <vector>

#include "absl/strings/str_cat.h"
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

enum : size_t { kIdx, kValue };                   // tensor inputs, in call order
enum : int { kRecvIdx, kRecvValue, kRecvCount };  // outputs

struct Sizes {
  int64_t nodes, nnz, hidden;
};

// PKB's sizes: Nn = roundup(max(100000, M), W), nnz = max(1024, min(M/W, 50000)),
// Hd = max(8, min(N, 128)).
Sizes SizesOf(const RunConfig& cfg) {
  const int64_t w = cfg.world;
  const int64_t base = std::max<int64_t>(100000, cfg.m);
  return {(base + w - 1) / w * w, std::max<int64_t>(1024, std::min<int64_t>(cfg.m / w, 50000)),
          std::max<int64_t>(8, std::min<int64_t>(cfg.n, 128))};
}

class GnnSparseEmbeddingAll2All : public Problem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        67,
        "67_gnn_sparse_embedding_all2all",
        1,
        "DGL sparse_all_to_all_push with remainder partitioning (NodeEmbedding sparse optimizer)",
        "other",
        R"md(Push sparse embedding rows (index, value row) to the rank that owns each index, over
WORLD. Any W.

- Sizes: Nn = roundup(max(100000, M), W); nnz = max(1024, min(M/W, 50000)) (1024 at
  the defaults); Hd = max(8, min(N, 128)).
- Inputs per rank r, drawn on the device in this
  order: `idx` (nnz,) int64 = randint[0, Nn); `value` (nnz, Hd) run dtype = randn.
  Scalar `num_nodes` = Nn (unused by the computation).
- Computation: W = 1: the inputs are the outputs. Otherwise the owner of entry j is
  idx[j] mod W; entries are sorted by owner, STABLY (original order within an owner),
  the per-owner counts are exchanged (all_to_all_single), then idx and the value rows
  are exchanged with those variable splits (all_to_all_single twice).
- Outputs on rank r, in order: `recv_idx` (W*nnz,) int64 and `recv_value` (W*nnz, Hd)
  run dtype hold, in their first R rows, the entries with idx mod W = r from source
  rank 0, then source 1, ..., each source's in its original order; `recv_count` 0-d
  int64 = R = sum over sources s of #{j : idx_s[j] mod W = r} (about nnz). R depends on
  the data: the candidate writes the row count to `recv_count`; W*nnz rows is a
  capacity (each source sends at most its nnz entries). The count is compared exactly,
  then only the first R rows of `recv_idx` and `recv_value`; rows past R are ignored.
- Pure data movement: all outputs bit-exact. No other row order is accepted (an
  unstable sort by owner, or rows in destination-of-index order, fail).
- Host syncs in PKB's reference: the received counts are read back before the
  variable all-to-alls.
- Traffic: about nnz (8 + Hd b) (W-1)/W bytes each way per rank. FLOPs: 0.)md"};
    return i;
  }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    return RequirePositiveShape(cfg);
  }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    const Sizes s = SizesOf(cfg);
    Inputs in;
    in.Add("idx", at::randint(0, s.nodes, {s.nnz},
                              at::TensorOptions().dtype(at::kLong).device(cfg.device)));
    in.Add("value", at::randn({s.nnz, s.hidden}, Opts(cfg)));
    in.scalars.push_back(ScalarArg::Int("num_nodes", s.nodes));
    return in;
  }

  // Capacity: each of the W sources sends a rank at most all of its nnz entries.
  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    const Sizes s = SizesOf(cfg);
    const int64_t cap = cfg.world * s.nnz;
    return {{"recv_idx", {cap}, at::kLong, kRecvCount},
            {"recv_value", {cap, s.hidden}, cfg.dtype, kRecvCount},
            {"recv_count", {}, at::kLong}};
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    const int64_t w = comm.size();
    const at::Tensor& idx = in[kIdx];
    const at::Tensor& value = in[kValue];
    auto count = [&](int64_t rows) {
      return at::scalar_tensor(rows, at::TensorOptions().dtype(at::kLong).device(idx.device()));
    };
    if (w == 1) return std::vector<at::Tensor>{idx.clone(), value.clone(), count(idx.size(0))};
    at::Tensor owner = idx.remainder(w);
    at::Tensor send_counts = at::bincount(owner, {}, w);
    at::Tensor perm = std::get<1>(owner.sort(/*stable=*/true, /*dim=*/0, /*descending=*/false));
    at::Tensor recv_counts = at::empty_like(send_counts);
    PKB_RETURN_IF_ERROR(comm.AllToAllSingle(recv_counts, send_counts, {}, {}));
    std::vector<int64_t> in_splits = ToHost(send_counts), out_splits = ToHost(recv_counts);
    int64_t rows = 0;
    for (int64_t n : out_splits) rows += n;
    at::Tensor send_idx = idx.index_select(0, perm).contiguous();
    at::Tensor send_value = value.index_select(0, perm).contiguous();
    at::Tensor recv_idx = at::empty({rows}, idx.options());
    at::Tensor recv_value = at::empty({rows, value.size(1)}, value.options());
    PKB_RETURN_IF_ERROR(comm.AllToAllSingle(recv_idx, send_idx, out_splits, in_splits));
    PKB_RETURN_IF_ERROR(comm.AllToAllSingle(recv_value, send_value, out_splits, in_splits));
    return std::vector<at::Tensor>{recv_idx, recv_value, count(rows)};
  }

  // Rank r's rows: every source's entries with idx mod W = r, masked in source order.
  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    const int64_t w = static_cast<int64_t>(all.size());
    std::vector<std::vector<at::Tensor>> res;
    for (int64_t r = 0; r < w; ++r) {
      std::vector<at::Tensor> idx, value;
      for (const Inputs& in : all) {
        at::Tensor mine = in[kIdx].remainder(w).eq(r);
        idx.push_back(in[kIdx].masked_select(mine));
        value.push_back(in[kValue].index_select(0, mine.nonzero().reshape({-1})));
      }
      at::Tensor recv_idx = at::cat(idx);
      res.push_back({recv_idx, at::cat(value), at::scalar_tensor(recv_idx.size(0), at::kLong)});
    }
    return res;
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    static const char* const kWhy[] = {
        "Indices are moved, never computed, in the one order a stable sort by owner and the "
        "source-rank order of the exchange fix: exact.",
        "Value rows are moved with their indices: bit-exact.",
        "The number of rows received: an integer, exact."};
    return {0, 0, true, kWhy[index]};
  }

  Roofline GetRoofline(const RunConfig& cfg) const override {
    const Sizes s = SizesOf(cfg);
    const double row = 8 + s.hidden * ElementBytes(cfg.dtype);
    Roofline r;
    r.nvlink_bytes = s.nnz * row * (cfg.world - 1) / cfg.world;
    r.hbm_bytes = 2 * s.nnz * row;  // read every entry once, write about as many
    r.flops = 0;
    return r;
  }

 private:
  static std::vector<int64_t> ToHost(const at::Tensor& t) {
    at::Tensor c = t.to(at::kCPU).contiguous();
    return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
  }
};
PKB_REGISTER_PROBLEM(GnnSparseEmbeddingAll2All);

}  // namespace
}  // namespace pkb
