// Shared pieces of the Ulysses sequence-parallel problems 33-39 (VeOmni / verl helpers): PKB's
// attention sizes, its world-size rule, and the list all-to-all every helper is built on.
#ifndef PKB_PROBLEMS_CP_ULYSSES_H_
#define PKB_PROBLEMS_CP_ULYSSES_H_

#include <ATen/ATen.h>

#include <algorithm>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "problems/harness/comm.h"
#include "problems/harness/problem.h"

namespace pkb::ulysses {

// PKB's (B, T, H, D) for the attention problems 36-39: B = max(1, M/64), T = max(1, N/64)
// (T is the local sequence in 36-38, the global one in 39), H = 8 heads of D = 64.
struct Dims {
  int64_t b, t, h, d;
};
Dims AttnDims(const RunConfig& cfg);

// PKB's input builder asserts that the 8 heads split evenly over the ranks.
absl::Status RequireWorldDividesHeads(const RunConfig& cfg, const char* slug);

// dist.all_to_all over `comm` of the W equal pieces of `x` along `scatter_dim` (piece j goes to
// rank j); the pieces received are concatenated along `gather_dim` in source-rank order. The
// caller guarantees that W divides x.size(scatter_dim). At W = 1 it is a contiguous copy.
absl::StatusOr<at::Tensor> ListAllToAll(Comm& comm, const at::Tensor& x, int64_t scatter_dim,
                                        int64_t gather_dim);

// The oracle's side of ListAllToAll: what rank r receives, from every rank's `x`.
at::Tensor AllToAllOracle(const std::vector<at::Tensor>& xs, int64_t r, int64_t scatter_dim,
                          int64_t gather_dim);

}  // namespace pkb::ulysses

#endif  // PKB_PROBLEMS_CP_ULYSSES_H_
