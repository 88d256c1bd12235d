// The feature exchange of DGL GraphBolt's cooperative minibatching (CooperativeConvFunction),
// shared by problems 65 (forward) and 66 (backward).
//
// Every rank cuts its rows into W chunks and addresses them RELATIVELY: chunk k goes to rank
// (r + k) mod W, and output chunk k is filled by rank (r + k) mod W. GraphBolt builds this by
// rotating both chunk lists by the rank before a plain all_to_all, so
//   out_r[k] = sent_{(r+k) mod W}[(-k) mod W].
#ifndef PKB_PROBLEMS_OTHER_GNN_EXCHANGE_H_
#define PKB_PROBLEMS_OTHER_GNN_EXCHANGE_H_

#include <ATen/ATen.h>

#include <algorithm>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "problems/harness/comm.h"
#include "problems/harness/problem.h"

namespace pkb::gnn {

// PKB's sizes: p rows per peer, Hd features, T = p W rows exchanged per rank.
struct ExchangeDims {
  int64_t p, hd, t;
};

ExchangeDims ExchangeSizes(const RunConfig& cfg);

// Rank `comm.rank()`'s exchange: `in` is cut into chunks of `in_sizes` rows (chunk k goes to
// rank (r + k) mod W); the result is cut into chunks of `out_sizes` rows (chunk k comes from rank
// (r + k) mod W). Sizes are in chunk order, as GraphBolt's split lists are.
absl::StatusOr<at::Tensor> RelativeAllToAll(Comm& comm, const at::Tensor& in,
                                            const std::vector<int64_t>& in_sizes,
                                            const std::vector<int64_t>& out_sizes);

// The exchange's result on rank r for equal chunks of p rows, from every rank's sent rows:
// out_r[k] = sent_{(r+k) mod W}[(-k) mod W]. Written from the formula, not from the rotation.
at::Tensor RelativeExchangeOracle(const std::vector<at::Tensor>& sent, int r, int64_t p);

}  // namespace pkb::gnn

#endif  // PKB_PROBLEMS_OTHER_GNN_EXCHANGE_H_
