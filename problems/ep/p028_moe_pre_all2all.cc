// Problem 28 — MoE dispatch: permute tokens expert-major, all-to-all them with given (synthetic,
// balanced) split sizes, and regroup the received chunks by local expert.
#include <vector>

#include "absl/strings/str_cat.h"
#include "problems/ep/moe_pipeline.h"
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

constexpr int64_t kExperts = 8;
constexpr int64_t kTopK = 2;

enum : size_t { kHidden, kMask, kCounts };  // tensor inputs, in call order

// PKB's split list: W entries of floor(rows / W), the remainder added to the last.
std::vector<int64_t> BalancedSplits(int64_t rows, int64_t world) {
  std::vector<int64_t> splits(world, rows / world);
  splits.back() += rows % world;
  return splits;
}

class MoePreAll2All : public Problem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        28,
        "28_moe_pre_all2all",
        1,
        "generic (MoE all-to-all token dispatcher: permute by expert, all-to-all, regroup by "
        "local expert)",
        "expert parallel",
        R"md(The dispatch half of an expert-parallel MoE layer over WORLD: E = 8 experts, top-2,
L = 8/W local experts per rank. Requires W | 8 and W | 2M (W = 8: 4 | M).

- Inputs per rank r, in call order, drawn on the
  device in this order:
  `hidden_states` X (M, N) run dtype, randn;
  `expert_mask` (8, 2, M) float32 0/1: for each token j = 0..M-1 in turn, randperm(8)
  (int64, on the device); its first two entries e0 != e1 give mask[e0, 0, j] = mask[e1,
  1, j] = 1. Every token has exactly two distinct experts;
  scalar num_experts = 8;
  `input_splits[s]`, `output_splits[s]` (int scalars, s = 0..W-1; Python lists in PKB):
  all 2M/W. These are SYNTHETIC balanced splits: they do not follow expert ownership;
  `num_global_tokens_per_local_expert` C (W, L) int64 on the device: the 8 values
  floor(2M/8), the first (2M mod 8) of them (row-major) plus one (also synthetic).
  Every rank's X and mask differ; the splits and C are the same on all ranks.
- Computation: (1) R = expert_mask.sum(dim=1) (8, M) float32. (2) perm = the tokens j
  with R[e, j] != 0, expert-major (e = 0..7), ascending j within an expert: (2M,) int64;
  Xp = X[perm]. (3) all_to_all_single of Xp's rows: rows [s B, (s+1) B) (B = 2M/W) go
  to rank s, received blocks stacked in source-rank order -> Y (2M, N); no exchange at
  W = 1. (4) Cut Y into 8 consecutive chunks of sizes C read row-major (chunk s L + l =
  'from source s, local expert l') and concatenate them in local-expert-major order:
  for l = 0..L-1, for s = 0..W-1, chunk s L + l (W = 2: 0,4,1,5,2,6,3,7; W = 4:
  0,2,4,6,1,3,5,7; W = 1 or 8: identity).
- Outputs, in order: `global_permuted_hidden_states` (2M, N) run dtype; `routing_map`
  R (8, M) float32; `local_input_permutation_mapping` perm (2M,) int64. (PKB's fourth
  return value, the shape (M, N) of the flattened input, is a constant torch.Size, not
  data: it is not asked for.)
- The order of every output is fixed by the steps above (the split sizes cut the
  permuted rows at fixed positions, and the combine step consumes rows by position), so
  all three are compared bit for bit: no other token order is accepted.
- Host sync in PKB's reference: the chunk sizes C are read back (.tolist()).
- Traffic: (W-1)/W * 2M N b bytes each way per rank. FLOPs: 0.)md"};
    return i;
  }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    PKB_RETURN_IF_ERROR(RequirePositiveShape(cfg));
    if (kExperts % cfg.world != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the 8 experts are split evenly over the ranks (L = 8/W local experts each): W = ",
          cfg.world, " must divide 8 (W = 1, 2, 4 or 8)"));
    }
    if (2 * cfg.m % cfg.world != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the balanced split lists give every peer floor(2M/W) routed rows and the last one the "
          "remainder, which the ranks' lists only agree on when W | 2M: W = ",
          cfg.world, " does not divide 2M = ", 2 * cfg.m));
    }
    return absl::OkStatus();
  }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    const int64_t m = cfg.m, w = cfg.world, routed = kTopK * m;
    auto longs = at::TensorOptions().dtype(at::kLong).device(cfg.device);
    Inputs in;
    in.Add("hidden_states", at::randn({m, cfg.n}, Opts(cfg)));
    // PKB writes the mask element by element after each token's randperm; only the randperm
    // calls consume the generator, so the mask can be written at once afterwards.
    at::Tensor expert = DrawDistinctExperts(cfg, m, kExperts, kTopK);  // (M, 2): slot order
    at::Tensor slot = at::arange(kTopK, longs).unsqueeze(0).expand({m, kTopK});
    at::Tensor token = at::arange(m, longs).unsqueeze(1).expand({m, kTopK});
    at::Tensor mask = at::zeros({kExperts, kTopK, m}, longs);
    mask.index_put_({expert, slot, token}, at::ones({}, longs));
    in.Add("expert_mask", mask.to(at::kFloat));
    in.scalars.push_back(ScalarArg::Int("num_experts", kExperts));
    AddIntList(in, "input_splits", BalancedSplits(routed, w));
    AddIntList(in, "output_splits", BalancedSplits(routed, w));
    at::Tensor counts = at::full({kExperts}, routed / kExperts, longs);
    counts.narrow(0, 0, routed % kExperts).add_(1);
    in.Add("num_global_tokens_per_local_expert", counts.view({w, kExperts / w}));
    return in;
  }

  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    return {{"global_permuted_hidden_states", {kTopK * cfg.m, cfg.n}, cfg.dtype},
            {"routing_map", {kExperts, cfg.m}, at::kFloat},
            {"local_input_permutation_mapping", {kTopK * cfg.m}, at::kLong}};
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    const int64_t w = comm.size();
    const at::Tensor& x = in[kHidden];
    PKB_ASSIGN_OR_RETURN(std::vector<int64_t> in_splits, IntList(in, "input_splits"));
    PKB_ASSIGN_OR_RETURN(std::vector<int64_t> out_splits, IntList(in, "output_splits"));
    at::Tensor routing_map = in[kMask].sum(1);
    at::Tensor perm = PermutedTokenIndices(routing_map);
    at::Tensor permuted = x.index_select(0, perm).contiguous();
    int64_t expected = 0, rows = 0;
    for (int64_t n : in_splits) expected += n;
    for (int64_t n : out_splits) rows += n;
    if (expected != permuted.size(0)) {  // PKB raises here too
      return absl::InvalidArgumentError(absl::StrCat("EP split mismatch: input_splits sum (",
                                                     expected, ") != permuted tokens (",
                                                     permuted.size(0), ")"));
    }
    at::Tensor received = permuted;
    if (w > 1) {
      received = at::empty({rows, x.size(1)}, x.options());
      PKB_RETURN_IF_ERROR(comm.AllToAllSingle(received, permuted, out_splits, in_splits));
    }
    at::Tensor grouped = SortChunks(received, ToHostLongs(in[kCounts].reshape({-1})),
                                    ToExpertMajor(w, kExperts / w));
    return std::vector<at::Tensor>{grouped, routing_map, perm};
  }

  // Builds each output row's origin (source rank, position in the source's permuted rows) on
  // the host, then gathers once from all ranks' permuted rows.
  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    const int64_t w = static_cast<int64_t>(all.size()), local = kExperts / w;
    const int64_t routed = kTopK * cfg.m, block = routed / w;
    std::vector<at::Tensor> maps, perms, permuted;
    for (const Inputs& in : all) {
      at::Tensor mask = in[kMask].to(at::kCPU);
      at::Tensor map = (mask.select(1, 0) + mask.select(1, 1)).contiguous();
      auto mp = map.accessor<float, 2>();
      std::vector<int64_t> perm;
      for (int64_t e = 0; e < kExperts; ++e) {
        for (int64_t j = 0; j < cfg.m; ++j) {
          if (mp[e][j] != 0) perm.push_back(j);
        }
      }
      if (static_cast<int64_t>(perm.size()) != routed) {
        return absl::InvalidArgumentError("a token does not have exactly two experts");
      }
      at::Tensor p = at::tensor(perm, at::TensorOptions().dtype(at::kLong));
      maps.push_back(map);
      perms.push_back(p);
      permuted.push_back(in[kHidden].to(at::kCPU).index_select(0, p));
    }
    at::Tensor pool = at::cat(permuted, 0);  // rank s's row i at s * routed + i
    std::vector<std::vector<at::Tensor>> res;
    for (int64_t r = 0; r < w; ++r) {
      std::vector<int64_t> counts = ToHostLongs(all[r][kCounts]);  // (s, l) row-major
      std::vector<int64_t> origin;  // received row k = rank k / block's row r * block + k % block
      for (int64_t k = 0; k < routed; ++k) {
        origin.push_back((k / block) * routed + r * block + k % block);
      }
      std::vector<int64_t> start(w * local, 0), rows;
      for (int64_t q = 1; q < w * local; ++q) start[q] = start[q - 1] + counts[q - 1];
      for (int64_t l = 0; l < local; ++l) {
        for (int64_t s = 0; s < w; ++s) {
          for (int64_t i = 0; i < counts[s * local + l]; ++i) {
            rows.push_back(origin[start[s * local + l] + i]);
          }
        }
      }
      at::Tensor idx = at::tensor(rows, at::TensorOptions().dtype(at::kLong));
      res.push_back({pool.index_select(0, idx), maps[r], perms[r]});
    }
    return res;
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    static const char* const kWhy[] = {
        "Rows are moved, never computed, to positions the split sizes and chunk sizes fix: "
        "bit-exact.",
        "Sums of two 0/1 mask entries: exact.",
        "Token indices in the one order the permutation defines: exact."};
    return {0, 0, true, kWhy[index]};
  }

  Roofline GetRoofline(const RunConfig& cfg) const override {
    const double b = ElementBytes(cfg.dtype), m = cfg.m, n = cfg.n;
    const double f = static_cast<double>(cfg.world - 1) / cfg.world;
    const double rows = kTopK * m * n * b;  // the routed rows, once
    Roofline r;
    r.nvlink_bytes = f * rows;
    // Gather the routed rows from X, write them to their final place; read the mask, write R
    // and perm.
    r.hbm_bytes = 2 * rows + kExperts * kTopK * m * 4 + kExperts * m * 4 + kTopK * m * 8;
    r.flops = 0;
    return r;
  }
};
PKB_REGISTER_PROBLEM(MoePreAll2All);

}  // namespace
}  // namespace pkb
