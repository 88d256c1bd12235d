#include "problems/other/gnn_exchange.h"

namespace pkb::gnn {

ExchangeDims ExchangeSizes(const RunConfig& cfg) {
  const int64_t p = std::max<int64_t>(64, std::min<int64_t>(cfg.m / cfg.world, 1024));
  return {p, std::max<int64_t>(8, std::min<int64_t>(cfg.n, 128)), p * cfg.world};
}

absl::StatusOr<at::Tensor> RelativeAllToAll(Comm& comm, const at::Tensor& in,
                                            const std::vector<int64_t>& in_sizes,
                                            const std::vector<int64_t>& out_sizes) {
  const int w = comm.size(), r = comm.rank();
  if (static_cast<int>(in_sizes.size()) != w || static_cast<int>(out_sizes.size()) != w) {
    return absl::InvalidArgumentError(absl::StrCat("the split lists need ", w, " entries, got ",
                                                   in_sizes.size(), " and ", out_sizes.size()));
  }
  std::vector<at::Tensor> chunks = at::split_with_sizes(in, in_sizes, 0);
  std::vector<at::Tensor> by_peer;  // peer j gets chunk (j - r) mod W
  std::vector<int64_t> in_splits, out_splits;
  int64_t rows = 0;
  for (int j = 0; j < w; ++j) {
    const int k = (j - r + w) % w;
    by_peer.push_back(chunks[k]);
    in_splits.push_back(in_sizes[k]);
    out_splits.push_back(out_sizes[k]);
    rows += out_sizes[k];
  }
  at::Tensor send = at::cat(by_peer, 0).contiguous();
  std::vector<int64_t> shape = in.sizes().vec();
  shape[0] = rows;
  at::Tensor recv = at::empty(shape, in.options());
  PKB_RETURN_IF_ERROR(comm.AllToAllSingle(recv, send, out_splits, in_splits));
  std::vector<at::Tensor> from_peer = at::split_with_sizes(recv, out_splits, 0);
  std::vector<at::Tensor> out;  // output chunk k came from peer (r + k) mod W
  for (int k = 0; k < w; ++k) out.push_back(from_peer[(r + k) % w]);
  return at::cat(out, 0).contiguous();
}

at::Tensor RelativeExchangeOracle(const std::vector<at::Tensor>& sent, int r, int64_t p) {
  const int w = static_cast<int>(sent.size());
  std::vector<at::Tensor> out;
  for (int k = 0; k < w; ++k) {
    out.push_back(sent[(r + k) % w].narrow(0, ((w - k) % w) * p, p));
  }
  return at::cat(out, 0).contiguous();
}

}  // namespace pkb::gnn
