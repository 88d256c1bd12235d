// Problem 10 — row-sharded embedding table looked up through all-to-all: requests bucketed by
// owner rank, rows returned in that bucketed (owner-sorted) order.
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

// The host-side copy of a small int64 tensor.
std::vector<int64_t> ToVector(const at::Tensor& t) {
  at::Tensor c = t.to(at::kCPU).to(at::kLong).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

class EmbeddingLookup : public Problem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        10,
        "10_embedding_lookup",
        1,
        "generic (row-sharded embedding table looked up through all-to-all)",
        "other (sharded embedding / all-to-all lookup)",
        R"md(Lookup in a row-sharded embedding table: each rank holds M rows of a global (W*M, N) table
T (T[s*M + i] = rank s's local_shard[i]) and requests M rows of T by global index.

- Inputs per rank r, in call order (`indices`, `local_shard`), but drawn local_shard first
  (on the device):
  `local_shard` (M, N) run dtype, randn; then `indices` (M,) int64, randint(0, W*M)
  (uniform over the whole table). Both differ on every rank.
- Computation: owner(v) = floor(v / M). The reference buckets this rank's indices by owner
  (stable: original relative order inside a bucket), exchanges the counts (all-to-all of
  W int64), sends each bucket to its owner (all-to-all-v of int64 indices), the owner
  gathers local_shard[v - owner*M] for each request, and the rows go back (all-to-all-v
  with the splits swapped).
- Output: `rows` (M, N) run dtype. Row k = T[p_k], where p is this rank's index list
  re-ordered STABLY BY OWNER RANK (all indices owned by rank 0 in their original relative
  order, then those of rank 1, ...). The original order is never restored; returning rows
  in the original index order is wrong (unless every index has the same owner).
- Pure copies: compared bit for bit. The all-to-all-v split sizes are data-dependent
  (the reference reads the counts back to the host).
- Traffic: ~(W-1)/W * M * 8 bytes of indices and ~(W-1)/W * M*N*b bytes of rows each way
  per rank, plus W * 8 bytes of counts. FLOPs: 0.)md"};
    return i;
  }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    return RequirePositiveShape(cfg);
  }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    at::Tensor shard = at::randn({cfg.m, cfg.n}, Opts(cfg));
    at::Tensor indices = at::randint(0, cfg.world * cfg.m, {cfg.m},
                                     at::TensorOptions().dtype(at::kLong).device(cfg.device));
    Inputs in;
    in.Add("indices", indices);
    in.Add("local_shard", shard);
    return in;
  }

  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    return {{"rows", {cfg.m, cfg.n}, cfg.dtype}};
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    const int w = comm.size();
    const int64_t m = in[1].size(0);
    const at::Tensor& indices = in[0];
    const at::Tensor& shard = in[1];
    // (1) Bucket by owner, stably.
    at::Tensor owner = at::div(indices, m, "floor");
    at::Tensor order =
        std::get<1>(at::sort(owner, std::optional<bool>(true), /*dim=*/0, /*descending=*/false));
    at::Tensor bucketed = indices.index_select(0, order).contiguous();
    at::Tensor send_counts = at::bincount(owner, {}, w).to(at::kLong).contiguous();
    // (2) Exchange counts.
    at::Tensor recv_counts = at::empty_like(send_counts);
    PKB_RETURN_IF_ERROR(comm.AllToAllSingle(recv_counts, send_counts, {}, {}));
    std::vector<int64_t> in_splits = ToVector(send_counts);
    std::vector<int64_t> out_splits = ToVector(recv_counts);
    int64_t total = 0;
    for (int64_t c : out_splits) total += c;
    // (3) Send the requests to their owners.
    at::Tensor requests = at::empty({total}, indices.options());
    PKB_RETURN_IF_ERROR(comm.AllToAllSingle(requests, bucketed, out_splits, in_splits));
    // (4) Look the rows up.
    at::Tensor local = (requests - comm.rank() * m).clamp(0, m - 1);
    at::Tensor found = shard.index_select(0, local).contiguous();
    // (5) Send the rows back; they land in the bucketed order.
    at::Tensor rows = at::empty({indices.size(0), shard.size(1)}, shard.options());
    PKB_RETURN_IF_ERROR(comm.AllToAllSingle(rows, found, in_splits, out_splits));
    return std::vector<at::Tensor>{rows};
  }

  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    std::vector<at::Tensor> shards;
    for (const auto& in : all) shards.push_back(in[1]);
    at::Tensor table = at::cat(shards, 0);
    std::vector<std::vector<at::Tensor>> res;
    for (const auto& in : all) {
      // Stable order by owner, written independently of the reference: one pass per owner.
      std::vector<int64_t> idx = ToVector(in[0]), sorted;
      for (int64_t s = 0; s < static_cast<int64_t>(all.size()); ++s) {
        for (int64_t v : idx) {
          if (v / cfg.m == s) sorted.push_back(v);
        }
      }
      at::Tensor p = at::tensor(sorted, at::TensorOptions().dtype(at::kLong)).to(table.device());
      res.push_back({table.index_select(0, p).contiguous()});
    }
    return res;
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    return {0, 0, true, "Rows are copied from the table, never computed: bit-exact."};
  }

  Roofline GetRoofline(const RunConfig& cfg) const override {
    const double b = ElementBytes(cfg.dtype);
    const double f = static_cast<double>(cfg.world - 1) / cfg.world;
    const double rows = cfg.m * cfg.n * b;
    Roofline r;
    r.nvlink_bytes = f * cfg.m * 8.0 + f * rows + cfg.world * 8.0;
    r.hbm_bytes = 2.0 * rows + 4.0 * cfg.m * 8.0 + r.nvlink_bytes;  // gather rows, write output
    r.flops = 0;
    r.collective_bytes = cfg.m * cfg.n * b;
    r.busbw_factor = f;
    return r;
  }
};
PKB_REGISTER_PROBLEM(EmbeddingLookup);

}  // namespace
}  // namespace pkb
