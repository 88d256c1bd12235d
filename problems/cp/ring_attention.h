// Ring attention as PKB's problems 54-57 compute it (ring-flash-attention's RingComm schedule):
// the block attention with its logsumexp, the lse merge, the forward and backward rings over a
// context-parallel group, and their single-process counterparts for oracles.
//
// Layout: q, k, v, dout, out are (B, S, H, Dh) in the run dtype, upcast to fp32 inside; lse is
// (B, H, S) fp32. CP rank c owns the contiguous positions [c S, (c+1) S) (no zig-zag).
//
//   ring::Qkv x = ring::ProjectQkv(hidden, w_qkv, heads);
//   PKB_ASSIGN_OR_RETURN(at::Tensor ctx, ring::Forward(*cp, x.q, x.k, x.v, scale, true));
#ifndef PKB_PROBLEMS_CP_RING_ATTENTION_H_
#define PKB_PROBLEMS_CP_RING_ATTENTION_H_

#include <ATen/ATen.h>

#include <cmath>
#include <vector>

#include "absl/status/statusor.h"
#include "problems/harness/comm.h"

namespace pkb::ring {

// PKB's softmax_scale = None: Dh^-1/2.
inline double DefaultScale(int64_t head_dim) {
  return std::pow(static_cast<double>(head_dim), -0.5);
}

struct Block {
  at::Tensor out;  // (B, S, H, Dh) fp32
  at::Tensor lse;  // (B, H, S) fp32
};

// One attention block in fp32. With `causal`, query i (at position i + q_offset in k's frame)
// does not see keys j > i + q_offset; q_offset = 0 is the ring's diagonal block.
Block LocalAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale,
                     bool causal, int64_t q_offset = 0);

// The running (out, lse) of the ring, merged block by block through sigmoid / logsigmoid.
struct Merged {
  at::Tensor out;  // (B, S, H, Dh) fp32
  at::Tensor lse;  // (B, S, H, 1) fp32
  void Add(const Block& b);
};

// The forward ring over `cp` (PKB's _ring_attn_forward): W steps, k and v forwarded to cp rank
// c + 1 each step; with `causal`, blocks of later ranks are skipped (but still forwarded).
// Returns the merged output in fp32; the caller casts it.
absl::StatusOr<at::Tensor> Forward(Comm& cp, const at::Tensor& q, const at::Tensor& k,
                                   const at::Tensor& v, double scale, bool causal);

// Forward's result for cp rank `c` from every cp rank's q, k, v (indexed by cp rank), in one
// process: the same blocks merged in the ring's step order. It is first held to one fp32 softmax
// over the visible keys (else INTERNAL), so an oracle built on it is the exact attention.
absl::StatusOr<at::Tensor> ForwardOracle(const std::vector<at::Tensor>& qs,
                                         const std::vector<at::Tensor>& ks,
                                         const std::vector<at::Tensor>& vs, int c, double scale,
                                         bool causal);

// F.linear(hidden, w_qkv) in the run dtype, viewed (B, S, 3, heads, Dh) and split into
// contiguous q, k, v (PKB's qkv.unbind(dim=2)).
struct Qkv {
  at::Tensor q, k, v;
};
Qkv ProjectQkv(const at::Tensor& hidden, const at::Tensor& w_qkv, int64_t heads);

// PKB's attention block of problems 55 and 56, in the run dtype: ProjectQkv, the causal forward
// ring over `cp` cast to the dtype, and F.linear(ctx (B, S, heads Dh), w_o).
absl::StatusOr<at::Tensor> AttentionLayer(Comm& cp, const at::Tensor& hidden,
                                          const at::Tensor& w_qkv, const at::Tensor& w_o,
                                          int64_t heads, double scale);

// AttentionLayer for every member of one cp group in one process (vectors indexed by cp rank).
absl::StatusOr<std::vector<at::Tensor>> AttentionLayerOracle(const std::vector<at::Tensor>& hidden,
                                                             const std::vector<at::Tensor>& w_qkv,
                                                             const std::vector<at::Tensor>& w_o,
                                                             int64_t heads, double scale);

struct Grads {
  at::Tensor dq, dk, dv;  // (B, S, H, Dh) fp32
};

// One backward block (PKB's _local_attn_backward) with the given lse, in fp32:
// P = exp(q k^T scale - lse), dS = P (dout v^T - rowsum(dout out)), dq = dS k scale,
// dk = dS^T q scale, dv = P^T dout.
Grads LocalBackward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
                    const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse, double scale,
                    bool causal, int64_t q_offset = 0);

// One cp rank's backward inputs.
struct Shard {
  at::Tensor dout, q, k, v, out, lse;
};

// The backward ring over `cp` (PKB's _ring_attn_backward): k, v rotate forward; fp32 dk, dv
// accumulators travel one hop behind them, so that each rank ends with its own shard's dk, dv.
// dq sums the blocks in step order. Returns fp32 gradients; the caller casts them.
absl::StatusOr<Grads> Backward(Comm& cp, const Shard& mine, double scale, bool causal);

// Backward's result for cp rank `c` in one process, summed in the ring's orders, after holding
// it to a direct computation over all keys at once (else INTERNAL).
absl::StatusOr<Grads> BackwardOracle(const std::vector<Shard>& shards, int c, double scale,
                                     bool causal);

}  // namespace pkb::ring

#endif  // PKB_PROBLEMS_CP_RING_ATTENTION_H_
