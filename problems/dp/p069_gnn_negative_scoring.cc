// Problem 69 — link-prediction evaluation (MRR / Hits@k in DGL's examples): every rank gathers
// all ranks' positive and negative scores and ranks each positive among its negatives, after a
// sigmoid in the run dtype. Ranks hold different numbers of positives.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "problems/harness/common.h"
#include "problems/harness/registry.h"
#include "problems/harness/ties.h"

namespace pkb {
namespace {

// Outlier budget of the ranking (see GetTolerance).
constexpr double kOutlierRows = 0.01;

// PKB's positives on `rank` (rank-dependent) and negatives per positive.
int64_t Positives(const RunConfig& cfg, int rank) {
  return std::max<int64_t>(16, std::min<int64_t>(cfg.m / cfg.world, 1280)) + rank % 3;
}
int64_t Negatives(const RunConfig& cfg) {
  return std::max<int64_t>(100, std::min<int64_t>(cfg.n, 1000));
}
int64_t TotalPositives(const RunConfig& cfg) {
  int64_t total = 0;
  for (int r = 0; r < cfg.world; ++r) total += Positives(cfg, r);
  return total;
}

// PKB's ranking: sigmoid in the dtype, a descending sort of [pos, neg...] per row, and 1 + the
// position of column 0. The sort here is stable, so equal negatives stay behind the positive:
// the lowest rank a correct sort can give. PKB's torch.sort is unstable (any rank up to
// RankTiesFirst's); the tie rule accepts the whole range.
at::Tensor RankBySort(const at::Tensor& pos, const at::Tensor& neg) {
  at::Tensor scores = at::cat({pos.view({-1, 1}), neg}, 1).sigmoid();
  at::Tensor order = std::get<1>(scores.sort(/*stable=*/true, /*dim=*/1, /*descending=*/true));
  return order.eq(0).nonzero().select(1, 1).contiguous() + 1;
}

// The same ranking by counting: 1 + #{j : sigmoid(neg_j) > sigmoid(pos)}, sigmoids in the dtype.
at::Tensor RankByCount(const at::Tensor& pos, const at::Tensor& neg) {
  return neg.sigmoid().gt(pos.sigmoid().view({-1, 1})).sum(1).to(at::kLong) + 1;
}

// The highest rank a correct sort can give: every equal negative ahead of the positive.
at::Tensor RankTiesFirst(const at::Tensor& pos, const at::Tensor& neg) {
  return neg.sigmoid().ge(pos.sigmoid().view({-1, 1})).sum(1).to(at::kLong) + 1;
}

// Every rank's scores on every rank, rows in rank order: PKB's all-reduce of the counts, then an
// all-to-all-v in which every rank sends its whole tensors to every rank.
absl::StatusOr<std::pair<at::Tensor, at::Tensor>> GatherScores(Comm& comm, const Inputs& in) {
  const int w = comm.size();
  at::Tensor sizes = at::zeros({w}, in[0].options().dtype(at::kLong));
  sizes[comm.rank()] = in[0].size(0);
  PKB_RETURN_IF_ERROR(comm.AllReduce(sizes, ReduceOp::kSum));
  at::Tensor host_sizes = sizes.cpu();
  const std::vector<int64_t> recv_splits(host_sizes.const_data_ptr<int64_t>(),
                                         host_sizes.const_data_ptr<int64_t>() + w);
  int64_t total = 0;
  for (int64_t s : recv_splits) total += s;
  auto broadcast = [&](const at::Tensor& data) -> absl::StatusOr<at::Tensor> {
    std::vector<int64_t> repeat(data.dim(), 1), shape = data.sizes().vec();
    repeat[0] = w;
    shape[0] = total;
    at::Tensor send = data.repeat(repeat).contiguous();
    at::Tensor recv = at::empty(shape, data.options());
    const std::vector<int64_t> send_splits(w, data.size(0));
    PKB_RETURN_IF_ERROR(comm.AllToAllSingle(recv, send, recv_splits, send_splits));
    return recv;
  };
  PKB_ASSIGN_OR_RETURN(at::Tensor pos, broadcast(in[0]));
  PKB_ASSIGN_OR_RETURN(at::Tensor neg, broadcast(in[1]));
  return std::make_pair(pos, neg);
}

class GnnNegativeScoring : public Problem, public TieRule {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        69,
        "69_gnn_negative_scoring",
        2,
        "link-prediction evaluation ranking (rank of the positive among negatives for MRR and "
        "Hits@k, as in DGL's examples) after gathering the scores to every rank",
        "data parallel",
        R"md(Gather every rank's link-prediction scores and rank each positive among its
negatives. Any W; WORLD.

- Sizes: P_r = max(16, min(M / W, 1280)) + (r mod 3) positives on rank r (rank-
  dependent: 128..130 at M = 1024, W = 8, sum 1031); Nn = max(100, min(N, 1000))
  negatives per positive (1000 at N = 1024).
- Inputs per rank r (drawn in this order on the
  device): `local_pos_scores` (P_r,) run dtype, randn; `local_neg_scores` (P_r, Nn)
  run dtype, randn. (PKB's last argument, the group, is WORLD.)
- Computation (PKB's): all-reduce SUM of a W-vector holding P_r in slot r (the
  counts); all-gather-v of pos and neg in rank order (PKB does it as an
  all-to-all-v in which every rank sends its whole tensors to every rank); then per
  gathered row i, s = sigmoid([pos_i, neg_i,1 .. neg_i,Nn]) COMPUTED IN THE RUN DTYPE
  (rounded to bf16 at the default), a descending sort, and rank_i = 1 + the position
  of column 0.
- TIES: any order among equal scores passes. Negatives whose rounded sigmoid EQUALS
  the positive's may sort before or after it (PKB's torch.sort is unstable), so any
  rank_i from 1 + #{j : s_j > s_0} (a stable sort: ties behind the positive) to
  1 + #{j : s_j >= s_0} (ties ahead) is correct. bf16 sigmoids tie often (near x = 0
  a bf16 sigmoid step is 2^-8, 0.016 in x, so several of 1000 negatives share the
  positive's value). Comparing fp32 sigmoids or the raw scores orders those ties one
  way and lands inside the range; a rank outside it is wrong.
- Output on every rank: `ranks` (sum of P_r,) int64, identical on all ranks, rows
  in rank order (rank 0's positives first).
- Tolerance: exact (within the tie range above), except that up to 1% of rows may be
  off by +-1 beyond it. Computing the bf16 sigmoid as round(1 / (1 + exp(-x))) in
  fp32 with another exp (expf, __expf, a tanh form) moves the fp32 value by a few
  ulps, which can round a rare x to the neighbouring bf16 value and move a rank by
  one when that x sits next to the positive's bin.
- Traffic: each rank receives (sum P - P_r)(1 + Nn) b bytes (the reference sends W
  copies of its own data). Work: O(sum P * Nn) comparisons with the counting
  formula (the reference sorts every row).)md"};
    return i;
  }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    PKB_RETURN_IF_ERROR(RequirePositiveShape(cfg));
    if (!at::isFloatingType(cfg.dtype)) {
      return absl::InvalidArgumentError(
          absl::StrCat("69_gnn_negative_scoring: the run dtype must be floating, got ",
                       c10::toString(cfg.dtype)));
    }
    return absl::OkStatus();
  }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    const int64_t p = Positives(cfg, rank);
    Inputs in;
    in.Add("local_pos_scores", at::randn({p}, Opts(cfg)));
    in.Add("local_neg_scores", at::randn({p, Negatives(cfg)}, Opts(cfg)));
    return in;
  }

  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    return {{"ranks", {TotalPositives(cfg)}, at::kLong}};
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    if (comm.size() == 1) return std::vector<at::Tensor>{RankBySort(in[0], in[1])};
    PKB_ASSIGN_OR_RETURN(auto scores, GatherScores(comm, in));
    return std::vector<at::Tensor>{RankBySort(scores.first, scores.second)};
  }

  // The counting formula on the concatenated rows: no sort, so it also checks that the sort
  // keeps the positive ahead of equal negatives.
  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    std::vector<at::Tensor> pos, neg;
    for (const auto& in : all) {
      pos.push_back(in[0]);
      neg.push_back(in[1]);
    }
    at::Tensor ranks = RankByCount(at::cat(pos), at::cat(neg));
    return std::vector<std::vector<at::Tensor>>(all.size(), {ranks});
  }

  // The tie rule: one key, the highest correct rank of every row (ties ahead of the positive);
  // the reference's rank is the lowest. A rank anywhere between is the reference's.
  absl::StatusOr<std::vector<at::Tensor>> TieKeys(
      Comm& comm, const Inputs& in, const RunConfig& cfg,
      const std::vector<at::Tensor>& expected) const override {
    if (comm.size() == 1) return std::vector<at::Tensor>{RankTiesFirst(in[0], in[1])};
    PKB_ASSIGN_OR_RETURN(auto scores, GatherScores(comm, in));
    return std::vector<at::Tensor>{RankTiesFirst(scores.first, scores.second)};
  }

  absl::StatusOr<std::vector<std::vector<at::Tensor>>> OracleTieKeys(
      const std::vector<Inputs>& all, const RunConfig& cfg,
      const std::vector<std::vector<at::Tensor>>& expected) const override {
    std::vector<at::Tensor> pos, neg;
    for (const auto& in : all) {
      pos.push_back(in[0]);
      neg.push_back(in[1]);
    }
    at::Tensor high = RankTiesFirst(at::cat(pos), at::cat(neg));
    return std::vector<std::vector<at::Tensor>>(all.size(), {high});
  }

  absl::StatusOr<std::vector<at::Tensor>> ResolveTies(
      const RunConfig& cfg, const std::vector<at::Tensor>& expected,
      const std::vector<at::Tensor>& keys, const std::vector<at::Tensor>& actual) const override {
    // A rank in [low, high] becomes low; one above keeps its distance from the range, so that
    // the tolerance's +-1 outliers are measured from the nearest correct rank on either side.
    const at::Tensor& got = actual[0];
    const at::Tensor low = expected[0].to(got.device()), high = keys[0].to(got.device());
    at::Tensor resolved = at::where(got.ge(low), low, got);
    return std::vector<at::Tensor>{at::where(got.gt(high), low + (got - high), resolved)};
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    Tolerance t;
    t.atol = 0;
    t.rtol = 0;
    t.outlier_fraction = kOutlierRows;
    t.outlier_atol = 1;
    t.rationale =
        "Exact ranks, with up to 1% of rows allowed to be off by one. Any order among equal "
        "scores passes: a rank between 1 + the count of negatives whose sigmoid, rounded to the "
        "run dtype, is strictly above the positive's (a stable sort) and 1 + the count of those "
        "at or above it (ties first) is exact. A correct kernel may compute the fp32 sigmoid "
        "with another exp or formula, a few fp32 ulps away, which rounds a rare x to the other "
        "bf16 neighbour and moves a rank by one only when that x borders the positive's bin. "
        "An fp32 sigmoid or the raw scores order the bf16 ties one way and stay in the range. "
        "PKB's rtol = 1e-2 forgives +-1% of the rank: +-5 at rank 500, none at 10.";
    return t;
  }

  Roofline GetRoofline(const RunConfig& cfg) const override {
    const double b = ElementBytes(cfg.dtype);
    const double nn = static_cast<double>(Negatives(cfg));
    const double p = static_cast<double>(Positives(cfg, 0));
    const double total = static_cast<double>(TotalPositives(cfg));
    Roofline r;
    r.nvlink_bytes = (total - p) * (1 + nn) * b;
    r.hbm_bytes = total * (1 + nn) * b + total * 8;
    return r;
  }
};
PKB_REGISTER_PROBLEM(GnnNegativeScoring);

}  // namespace
}  // namespace pkb
