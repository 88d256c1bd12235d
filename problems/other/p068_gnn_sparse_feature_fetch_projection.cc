// Problem 68 — distributed feature-store lookup: node ids are routed to the rank that owns their
// row of a node-sharded embedding table, the rows come back by all-to-all-v, and every rank
// projects its fetched rows with its own matrix.
#include <cmath>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

enum : size_t { kShard, kIds, kProj };  // tensor inputs, in call order

int64_t RoundUp(int64_t a, int64_t m) { return (a + m - 1) / m * m; }

// The largest shard a rank may hold. The harness keeps two copies of every input alive (the
// pristine copy it checks the reference against while verifying; at least two rotating input
// sets while timing), and 2 x 56 GiB leaves ~28 GiB of an H200's 140 GiB for the CUDA context,
// NCCL and the candidate's buffers.
constexpr double kMaxShardBytes = 56.0 * (1ull << 30);

struct Dims {
  int64_t ntot, sh, e, q;  // table rows, rows per rank, embedding width, queries per rank
};

// PKB: Ntot = roundup(max(111e6, M), W), E = 256 if N >= 256 else 128, Q = max(20000, min(M/W,
// 200000)). PKB's fixed floors would make even a 64 x 64 test draw a 28 GB table, so below
// M = 1024 they scale down (Ntot floor 512 M, Q floor 16 M) and below N = 128 E = N: the
// default run (M, N = 1024) and every M >= 1024, N >= 128 are PKB's problem.
Dims Sizes(const RunConfig& cfg) {
  const bool small_m = cfg.m < 1024;
  const int64_t ntot =
      RoundUp(std::max<int64_t>(small_m ? 512 * cfg.m : 111000000, cfg.m), cfg.world);
  const int64_t e = cfg.n >= 256 ? 256 : (cfg.n >= 128 ? 128 : cfg.n);
  const int64_t q =
      std::max<int64_t>(small_m ? 16 * cfg.m : 20000, std::min<int64_t>(cfg.m / cfg.world, 200000));
  return {ntot, ntot / cfg.world, e, q};
}

std::vector<int64_t> ToVector(const at::Tensor& t) {
  at::Tensor c = t.to(at::kCPU).to(at::kLong).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

class GnnSparseFeatureFetch : public Problem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        68,
        "68_gnn_sparse_feature_fetch_projection",
        1,
        "generic GNN distributed feature store (node-id-sharded embedding table) lookup, then a "
        "dense projection",
        "other (distributed embedding fetch)",
        R"md(Fetch Q rows of a node-sharded embedding table by global node id over WORLD, then
project them with the rank's own matrix.

- Sizes: Ntot = roundup(max(111,000,000, M), W) table rows, Sh = Ntot/W rows per
  rank, E = 256 if N >= 256 else 128, Q = max(20000, min(M/W, 200000)) queries per
  rank (defaults, W = 8: Sh = 13,875,000, E = 256, Q = 20000; the shard is 7.1 GB
  per rank in bf16). These are PKB's for M >= 1024 and N >= 128. Below, for quick
  tests only, PKB's fixed floors shrink: Ntot's 111,000,000 becomes 512 M and Q's
  20000 becomes 16 M when M < 1024, and E = N when N < 128 (PKB's floors would draw
  a 28 GB table even at 64 x 64).
- Any W whose shard fits: a rank's shard (Sh x E x element bytes) must not exceed
  56 GiB, because the harness keeps two copies of every input alive (verification's
  pristine copy, two rotating timing sets) on a 140 GiB H200. At the defaults this
  refuses fp32 at W = 1 (106 GiB) and fp64 at W <= 3.
- Inputs per rank r, in call order:
  `local_embedding_shard` (Sh, E) run dtype, randn: rows r Sh .. (r+1) Sh - 1 of the
  global table; `input_node_ids` (Q,) int64, no RNG: for i < Q, owner = (i + r) mod
  W, local = (7 i + r) mod Sh, id = owner Sh + local; `proj_matrix` (E, E) run dtype,
  randn, drawn right after the shard (every rank's differs). Non-tensor:
  `num_total_nodes` = Ntot.
- Computation (PKB's reference): owner = min(id / ceil(Ntot/W), W-1); stable sort of
  the ids by owner; all-to-all of the W int64 counts; all-to-all-v of the sorted ids;
  each owner gathers shard[id - r Sh]; the rows go back by all-to-all-v (splits
  swapped) and are un-permuted to query order: Emb (Q, E) = table[ids]. Then
  out = Emb proj_r, a GEMM in the run dtype (fp32 accumulation, one rounding).
- Output: `out` (Q, E) run dtype.
- Tolerance: bf16 and fp16: PKB's atol = rtol = 1e-2 (|out| ~ sqrt(E) = 16; one bf16
  ulp is at most 2^-7 relative, so a GEMM accumulating in another order that rounds
  the other way passes). fp32: atol 2e-4, rtol 1e-4 (fp32 GEMMs in any order err
  ~1e-5; TF32 errs ~6e-3 and fails, as the catalog's fp32 baseline has TF32 off).
  fp64: 1e-10. A row from the wrong rank or in owner-sorted order fails.
- Traffic per rank: Q (8 + E b) (W-1)/W bytes sent (ids out, rows served back;
  b = element bytes); random row gathers of Q E b bytes; FLOPs 2 Q E^2.)md"};
    return i;
  }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    PKB_RETURN_IF_ERROR(RequirePositiveShape(cfg));
    const Dims d = Sizes(cfg);
    const double bytes = double(d.sh) * d.e * ElementBytes(cfg.dtype);
    if (bytes > kMaxShardBytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("68_gnn_sparse_feature_fetch_projection: a rank's shard (", d.sh, " x ", d.e,
                       ", ", bytes / (1ull << 30),
                       " GiB) exceeds 56 GiB; the harness keeps two copies of every input "
                       "alive on a 140 GiB GPU. Use more ranks or a 16-bit dtype."));
    }
    return absl::OkStatus();
  }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    const Dims d = Sizes(cfg);
    auto longs = at::TensorOptions().dtype(at::kLong).device(cfg.device);
    at::Tensor shard = at::randn({d.sh, d.e}, Opts(cfg));
    at::Tensor proj = at::randn({d.e, d.e}, Opts(cfg));
    at::Tensor base = at::arange(d.q, longs);
    at::Tensor owner = (base + rank).remainder(cfg.world);
    at::Tensor local = (base * 7 + rank).remainder(d.sh);
    Inputs in;
    in.Add("local_embedding_shard", shard);
    in.Add("input_node_ids", owner * d.sh + local);
    in.Add("proj_matrix", proj);
    in.scalars.push_back(ScalarArg::Int("num_total_nodes", d.ntot));
    return in;
  }

  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    const Dims d = Sizes(cfg);
    return {{"out", {d.q, d.e}, cfg.dtype}};
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    const int w = comm.size();
    const at::Tensor& ids = in[kIds];
    const at::Tensor& shard = in[kShard];
    int64_t ntot = 0;
    for (const ScalarArg& a : in.scalars) {
      if (a.name == "num_total_nodes") ntot = a.i;
    }
    const int64_t shard_size = (ntot + w - 1) / w;
    // (1) Route: stable sort by owner.
    at::Tensor owner = at::div(ids, shard_size, "floor").clamp_max(w - 1);
    at::Tensor order =
        std::get<1>(at::sort(owner, std::optional<bool>(true), /*dim=*/0, /*descending=*/false));
    at::Tensor sorted_ids = ids.index_select(0, order).contiguous();
    at::Tensor send_counts = at::bincount(owner, {}, w).to(at::kLong).contiguous();
    // (2) Counts, then the ids to their owners.
    at::Tensor recv_counts = at::empty_like(send_counts);
    PKB_RETURN_IF_ERROR(comm.AllToAllSingle(recv_counts, send_counts, {}, {}));
    std::vector<int64_t> send_splits = ToVector(send_counts);
    std::vector<int64_t> recv_splits = ToVector(recv_counts);
    int64_t total = 0;
    for (int64_t c : recv_splits) total += c;
    at::Tensor requests = at::empty({total}, ids.options());
    PKB_RETURN_IF_ERROR(comm.AllToAllSingle(requests, sorted_ids, recv_splits, send_splits));
    // (3) Serve the rows and send them back.
    at::Tensor fetched = shard.index_select(0, requests - comm.rank() * shard_size).contiguous();
    at::Tensor gathered = at::empty({ids.size(0), shard.size(1)}, shard.options());
    PKB_RETURN_IF_ERROR(comm.AllToAllSingle(gathered, fetched, send_splits, recv_splits));
    // (4) Back to query order (PKB indexes by argsort(sort_idx): the inverse permutation).
    at::Tensor emb = at::empty_like(gathered).index_copy_(0, order, gathered);
    return std::vector<at::Tensor>{at::matmul(emb, in[kProj])};
  }

  // The global table rebuilt from the shards, every query's row by its global id, the GEMM in
  // fp32 (fp64 for fp64) rounded once.
  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    const at::ScalarType acc = cfg.dtype == at::kDouble ? at::kDouble : at::kFloat;
    std::vector<at::Tensor> shards;
    for (const Inputs& in : all) shards.push_back(in[kShard]);
    at::Tensor table = at::cat(shards, 0);
    std::vector<std::vector<at::Tensor>> res;
    for (const Inputs& in : all) {
      at::Tensor emb = table.index_select(0, in[kIds]).to(acc);
      res.push_back({at::matmul(emb, in[kProj].to(acc)).to(cfg.dtype)});
    }
    return res;
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    Tolerance t;
    if (cfg.dtype == at::kBFloat16 || cfg.dtype == at::kHalf) {
      t.rationale =
          "PKB's atol = rtol = 1e-2. |out| ~ sqrt(E) = 16; a GEMM that accumulates in fp32 in "
          "another order and rounds once differs by at most one ulp (2^-7 relative in bf16), "
          "inside rtol. A row from the wrong rank or left in owner-sorted order (error ~N(0, "
          "2E)) fails.";
    } else if (cfg.dtype == at::kFloat) {
      t.atol = 2e-4;
      t.rtol = 1e-4;
      t.rationale =
          "fp32 with TF32 off (the catalog's baseline): |out| ~ sqrt(E) = 16, and fp32 GEMMs in "
          "any blocking or split-K order differ by ~1e-5, so atol 2e-4 + rtol 1e-4 admits them; "
          "TF32 (10-bit mantissas, ~6e-3 error) and bf16 fail, as do wrong or unsorted rows.";
    } else {
      t.atol = 1e-10;
      t.rtol = 1e-10;
      t.rationale =
          "fp64 GEMMs in any order differ by ~1e-14 at |out| ~ 16: 1e-10 admits them "
          "and rejects an fp32 computation.";
    }
    return t;
  }

  Roofline GetRoofline(const RunConfig& cfg) const override {
    const Dims d = Sizes(cfg);
    const double b = ElementBytes(cfg.dtype), f = double(cfg.world - 1) / cfg.world;
    const double rows = double(d.q) * d.e * b;
    Roofline r;
    r.nvlink_bytes = f * d.q * 8.0 + f * rows + cfg.world * 8.0;
    // Gather the served rows, write them; the GEMM reads Emb and proj, writes out.
    r.hbm_bytes = 2 * rows + 2 * rows + double(d.e) * d.e * b + 2 * d.q * 8.0;
    r.flops = 2.0 * d.q * d.e * d.e;
    return r;
  }
};
PKB_REGISTER_PROBLEM(GnnSparseFeatureFetch);

}  // namespace
}  // namespace pkb
