#include "problems/cp/ulysses.h"

namespace pkb::ulysses {

Dims AttnDims(const RunConfig& cfg) {
  return {std::max<int64_t>(1, cfg.m / 64), std::max<int64_t>(1, cfg.n / 64), 8, 64};
}

absl::Status RequireWorldDividesHeads(const RunConfig& cfg, const char* slug) {
  if (cfg.world < 1 || 8 % cfg.world != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        slug,
        " splits the H = 8 heads into W equal groups of consecutive heads (PKB's builder "
        "asserts 8 % W == 0): W = ",
        cfg.world, " is not one of 1, 2, 4, 8"));
  }
  return absl::OkStatus();
}

absl::StatusOr<at::Tensor> ListAllToAll(Comm& comm, const at::Tensor& x, int64_t scatter_dim,
                                        int64_t gather_dim) {
  const int64_t w = comm.size();
  if (x.size(scatter_dim) % w != 0) {
    return absl::InternalError(absl::StrCat("all-to-all of ", x.size(scatter_dim),
                                            " entries along dim ", scatter_dim, " over ", w,
                                            " ranks: unequal pieces"));
  }
  // Piece j becomes row j of one (W, ...) buffer, so that all_to_all_single moves it to rank j.
  at::Tensor send = at::stack(x.chunk(w, scatter_dim), 0).contiguous();
  at::Tensor recv = send;
  if (w > 1) {
    recv = at::empty_like(send);
    PKB_RETURN_IF_ERROR(comm.AllToAllSingle(recv, send, {}, {}));
  }
  return at::cat(recv.unbind(0), gather_dim).contiguous();
}

at::Tensor AllToAllOracle(const std::vector<at::Tensor>& xs, int64_t r, int64_t scatter_dim,
                          int64_t gather_dim) {
  const int64_t w = static_cast<int64_t>(xs.size());
  std::vector<at::Tensor> pieces;
  for (const at::Tensor& x : xs) {
    const int64_t piece = x.size(scatter_dim) / w;
    pieces.push_back(x.narrow(scatter_dim, r * piece, piece));
  }
  return at::cat(pieces, gather_dim).contiguous();
}

}  // namespace pkb::ulysses
