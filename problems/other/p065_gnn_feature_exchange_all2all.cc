// Problem 65 — DGL GraphBolt cooperative minibatching, forward feature exchange: every rank gathers
// its seed features by inverse ids and sends chunk k to the relative peer (r + k) mod W.
#include <vector>

#include "absl/strings/str_cat.h"
#include "problems/harness/common.h"
#include "problems/harness/registry.h"
#include "problems/other/gnn_exchange.h"

namespace pkb {
namespace {

enum : size_t { kFeatures, kIds };  // tensor inputs, in call order

// PKB's seed count: 3T/4 local feature rows (at least one).
int64_t SeedRows(const gnn::ExchangeDims& d) { return std::max<int64_t>(1, d.t * 3 / 4); }

class GnnFeatureExchange : public Problem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        65,
        "65_gnn_feature_exchange_all2all",
        1,
        "DGL GraphBolt cooperative minibatching, CooperativeConvFunction forward",
        "other (GNN feature exchange)",
        R"md(The forward feature exchange of GraphBolt's cooperative minibatching over WORLD: gather
rows by inverse ids, then an all-to-all whose chunks are addressed RELATIVELY to the
rank.

- Sizes: p = max(64, min(M/W, 1024)) rows per peer, Hd = max(8, min(N, 128)),
  T = p W, Sd = max(1, floor(3T/4)) (defaults, W = 8: p = 128, Hd = 128, T = 1024,
  Sd = 768). Any W.
- Inputs per rank r, in call order and drawn in
  this order on the device: `local_features` (Sd, Hd) run dtype, randn;
  `seed_inverse_ids` (T,) int64, randint(0, Sd). Non-tensor: `counts_sent[k]` and
  `counts_received[k]` (k = 0..W-1; Python lists in PKB), all p.
- Computation: G = local_features[seed_inverse_ids] (T, Hd), cut into W chunks of p
  rows (the cut follows counts_received). Chunk k is sent to rank (r + k) mod W, NOT to
  rank k; output chunk k (cut by counts_sent) receives what rank (r + k) mod W sent:
  out_r[k] = G_{(r+k) mod W}[(-k) mod W]. (GraphBolt rotates both chunk lists by the
  rank, then calls a plain all_to_all.)
- Output: `out` (T, Hd) run dtype.
- Tolerance: bit-exact. Rows are moved, never computed.
- Traffic: (W-1) p Hd b bytes sent per rank (b = element bytes); gather T Hd b, write
  T Hd b. FLOPs: 0.)md"};
    return i;
  }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    return RequirePositiveShape(cfg);
  }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    const gnn::ExchangeDims d = gnn::ExchangeSizes(cfg);
    const int64_t sd = SeedRows(d);
    Inputs in;
    in.Add("local_features", at::randn({sd, d.hd}, Opts(cfg)));
    in.Add("seed_inverse_ids",
           at::randint(0, sd, {d.t}, at::TensorOptions().dtype(at::kLong).device(cfg.device)));
    AddIntList(in, "counts_sent", std::vector<int64_t>(cfg.world, d.p));
    AddIntList(in, "counts_received", std::vector<int64_t>(cfg.world, d.p));
    return in;
  }

  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    const gnn::ExchangeDims d = gnn::ExchangeSizes(cfg);
    return {{"out", {d.t, d.hd}, cfg.dtype}};
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    PKB_ASSIGN_OR_RETURN(std::vector<int64_t> sent, IntList(in, "counts_sent"));
    PKB_ASSIGN_OR_RETURN(std::vector<int64_t> received, IntList(in, "counts_received"));
    at::Tensor gathered = in[kFeatures].index_select(0, in[kIds]);
    // PKB splits the output by counts_sent and the gathered rows by counts_received.
    PKB_ASSIGN_OR_RETURN(at::Tensor out, gnn::RelativeAllToAll(comm, gathered, received, sent));
    return std::vector<at::Tensor>{out};
  }

  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    const gnn::ExchangeDims d = gnn::ExchangeSizes(cfg);
    std::vector<at::Tensor> gathered;
    for (const Inputs& in : all) gathered.push_back(in[kFeatures].index_select(0, in[kIds]));
    std::vector<std::vector<at::Tensor>> res;
    for (int r = 0; r < cfg.world; ++r) {
      res.push_back({gnn::RelativeExchangeOracle(gathered, r, d.p)});
    }
    return res;
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    return {0, 0, true,
            "Rows are gathered and moved, never computed, to positions the relative chunk "
            "addressing fixes: bit-exact. Plain (absolute) all-to-all addressing or the rotation "
            "in the wrong direction puts other ranks' rows in the chunks and fails."};
  }

  Roofline GetRoofline(const RunConfig& cfg) const override {
    const gnn::ExchangeDims d = gnn::ExchangeSizes(cfg);
    const double b = ElementBytes(cfg.dtype), rows = double(d.t) * d.hd * b;
    Roofline r;
    r.nvlink_bytes = double(cfg.world - 1) * d.p * d.hd * b;
    r.hbm_bytes = 2 * rows + 8.0 * d.t;  // gather the rows (and read the ids), write the output
    r.flops = 0;
    r.collective_bytes = rows;
    r.busbw_factor = AllGatherFactor(cfg.world);  // nccl-tests' all-to-all factor, (W-1)/W
    return r;
  }
};
PKB_REGISTER_PROBLEM(GnnFeatureExchange);

}  // namespace
}  // namespace pkb
