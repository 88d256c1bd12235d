#include "problems/cp/ring_attention.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pkb::ring {
namespace {

// fp32 rounding of the ring's sums against one softmax: ~1e-6 relative; 1e-4 leaves room for
// libtorch's blocked matmuls and never admits a wrong block.
constexpr double kExactRtol = 1e-4;

at::Tensor Heads(const at::Tensor& t) { return t.transpose(1, 2).to(at::kFloat); }

// Keys at index > query index + q_offset are masked.
at::Tensor CausalMask(const at::Tensor& q, const at::Tensor& k, int64_t q_offset) {
  return at::ones({q.size(1), k.size(1)}, q.options().dtype(at::kBool))
      .triu(1 + q_offset)
      .unsqueeze(0)
      .unsqueeze(0);
}

absl::Status HoldToExact(const at::Tensor& ring, const at::Tensor& exact, const char* what, int c) {
  const double scale = std::max(1.0, exact.abs().max().item<double>());
  const double err = (ring - exact).abs().max().item<double>();
  if (!(err <= kExactRtol * scale)) {
    return absl::InternalError(absl::StrCat("ring ", what, " of cp rank ", c,
                                            " differs from the direct fp32 computation by ", err,
                                            " (max |value| ", scale, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

Block LocalAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale,
                     bool causal, int64_t q_offset) {
  at::Tensor scores = at::matmul(Heads(q), Heads(k).transpose(-2, -1)) * scale;
  if (causal) scores.masked_fill_(CausalMask(q, k, q_offset), -INFINITY);
  at::Tensor lse = at::logsumexp(scores, -1);
  at::Tensor out = at::matmul(at::softmax(scores, -1), Heads(v)).transpose(1, 2).contiguous();
  return {out, lse};
}

void Merged::Add(const Block& b) {
  at::Tensor block_lse = b.lse.transpose(-2, -1).unsqueeze(-1);
  if (!out.defined()) {
    out = b.out;
    lse = block_lse;
    return;
  }
  out = out - at::sigmoid(block_lse - lse) * (out - b.out);
  lse = lse - at::log_sigmoid(lse - block_lse);
}

absl::StatusOr<at::Tensor> Forward(Comm& cp, const at::Tensor& q, const at::Tensor& k_in,
                                   const at::Tensor& v_in, double scale, bool causal) {
  const int w = cp.size(), r = cp.rank();
  at::Tensor k = k_in.contiguous(), v = v_in.contiguous();
  Merged merged;
  for (int step = 0; step < w; ++step) {
    at::Tensor next_k, next_v;
    if (step + 1 != w) {
      next_k = at::empty_like(k);
      next_v = at::empty_like(v);
      PKB_RETURN_IF_ERROR(cp.BatchP2P({{P2POp::kSend, k, (r + 1) % w},
                                       {P2POp::kRecv, next_k, (r - 1 + w) % w},
                                       {P2POp::kSend, v, (r + 1) % w},
                                       {P2POp::kRecv, next_v, (r - 1 + w) % w}}));
    }
    if (!causal || step <= r) {
      merged.Add(LocalAttention(q, k, v, scale, /*causal=*/causal && step == 0));
    }
    if (step + 1 != w) {
      k = next_k;
      v = next_v;
    }
  }
  return merged.out;
}

absl::StatusOr<at::Tensor> ForwardOracle(const std::vector<at::Tensor>& qs,
                                         const std::vector<at::Tensor>& ks,
                                         const std::vector<at::Tensor>& vs, int c, double scale,
                                         bool causal) {
  const int w = static_cast<int>(qs.size());
  Merged ring;
  for (int step = 0; step < w; ++step) {
    const int j = (c - step + w) % w;
    if (!causal || step <= c) {
      ring.Add(LocalAttention(qs[c], ks[j], vs[j], scale, causal && step == 0));
    }
  }
  // Under the causal mask, keys of later ranks are invisible: leaving them out is exact.
  const int visible = causal ? c + 1 : w;
  std::vector<at::Tensor> k_vis(ks.begin(), ks.begin() + visible);
  std::vector<at::Tensor> v_vis(vs.begin(), vs.begin() + visible);
  Block exact = LocalAttention(qs[c], at::cat(k_vis, 1), at::cat(v_vis, 1), scale, causal,
                               /*q_offset=*/c * qs[c].size(1));
  PKB_RETURN_IF_ERROR(HoldToExact(ring.out, exact.out, "attention", c));
  return ring.out;
}

Qkv ProjectQkv(const at::Tensor& hidden, const at::Tensor& w_qkv, int64_t heads) {
  const int64_t b = hidden.size(0), s = hidden.size(1);
  const int64_t head_dim = w_qkv.size(0) / 3 / heads;
  std::vector<at::Tensor> qkv =
      at::linear(hidden, w_qkv).view({b, s, 3, heads, head_dim}).unbind(2);
  return {qkv[0].contiguous(), qkv[1].contiguous(), qkv[2].contiguous()};
}

namespace {
at::Tensor OutProjection(const at::Tensor& ctx, const at::Tensor& w_o) {
  return at::linear(ctx.reshape({ctx.size(0), ctx.size(1), -1}), w_o);
}
}  // namespace

absl::StatusOr<at::Tensor> AttentionLayer(Comm& cp, const at::Tensor& hidden,
                                          const at::Tensor& w_qkv, const at::Tensor& w_o,
                                          int64_t heads, double scale) {
  Qkv x = ProjectQkv(hidden, w_qkv, heads);
  PKB_ASSIGN_OR_RETURN(at::Tensor ctx, Forward(cp, x.q, x.k, x.v, scale, /*causal=*/true));
  return OutProjection(ctx.to(hidden.scalar_type()), w_o);
}

absl::StatusOr<std::vector<at::Tensor>> AttentionLayerOracle(const std::vector<at::Tensor>& hidden,
                                                             const std::vector<at::Tensor>& w_qkv,
                                                             const std::vector<at::Tensor>& w_o,
                                                             int64_t heads, double scale) {
  std::vector<at::Tensor> qs, ks, vs, outs;
  for (size_t c = 0; c < hidden.size(); ++c) {
    Qkv x = ProjectQkv(hidden[c], w_qkv[c], heads);
    qs.push_back(x.q);
    ks.push_back(x.k);
    vs.push_back(x.v);
  }
  for (size_t c = 0; c < hidden.size(); ++c) {
    PKB_ASSIGN_OR_RETURN(at::Tensor ctx, ForwardOracle(qs, ks, vs, static_cast<int>(c), scale,
                                                       /*causal=*/true));
    outs.push_back(OutProjection(ctx.to(hidden[c].scalar_type()), w_o[c]));
  }
  return outs;
}

Grads LocalBackward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
                    const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse, double scale,
                    bool causal, int64_t q_offset) {
  at::Tensor qh = Heads(q), kh = Heads(k), vh = Heads(v), doh = Heads(dout), outh = Heads(out);
  at::Tensor scores = at::matmul(qh, kh.transpose(-2, -1)) * scale;
  if (causal) scores.masked_fill_(CausalMask(q, k, q_offset), -INFINITY);
  at::Tensor probs = at::exp(scores - lse.unsqueeze(-1));
  at::Tensor dp = at::matmul(doh, vh.transpose(-2, -1));
  at::Tensor row_dot = (doh * outh).sum(-1, /*keepdim=*/true);
  at::Tensor ds = probs * (dp - row_dot);
  at::Tensor dq = at::matmul(ds, kh) * scale;
  at::Tensor dk = at::matmul(ds.transpose(-2, -1), qh) * scale;
  at::Tensor dv = at::matmul(probs.transpose(-2, -1), doh);
  return {dq.transpose(1, 2).contiguous(), dk.transpose(1, 2).contiguous(),
          dv.transpose(1, 2).contiguous()};
}

absl::StatusOr<Grads> Backward(Comm& cp, const Shard& mine, double scale, bool causal) {
  const int w = cp.size(), r = cp.rank();
  if (w == 1) {
    return LocalBackward(mine.dout, mine.q, mine.k, mine.v, mine.out, mine.lse, scale, causal);
  }
  const int next = (r + 1) % w, prev = (r - 1 + w) % w;
  at::Tensor k = mine.k.contiguous(), v = mine.v.contiguous();
  at::Tensor dq, dk, dv, recv_dk, recv_dv;
  for (int step = 0; step < w; ++step) {
    if (!causal || step <= r) {
      Grads b =
          LocalBackward(mine.dout, mine.q, k, v, mine.out, mine.lse, scale, causal && step == 0);
      if (step == 0) {
        dq = b.dq;
        dk = b.dk;
        dv = b.dv;
      } else {
        dq = dq + b.dq;
        dk = b.dk + recv_dk;
        dv = b.dv + recv_dv;
      }
    } else {
      dk = recv_dk;
      dv = recv_dv;
    }
    // PKB overlaps the k, v hop with the block; here both hops go in one batch after it, which
    // moves the same tensors between the same ranks.
    std::vector<P2POp> ops;
    at::Tensor next_k, next_v;
    if (step + 1 != w) {
      next_k = at::empty_like(k);
      next_v = at::empty_like(v);
      ops.push_back({P2POp::kSend, k, next});
      ops.push_back({P2POp::kRecv, next_k, prev});
      ops.push_back({P2POp::kSend, v, next});
      ops.push_back({P2POp::kRecv, next_v, prev});
    }
    recv_dk = at::empty_like(dk);
    recv_dv = at::empty_like(dv);
    ops.push_back({P2POp::kSend, dk, next});
    ops.push_back({P2POp::kRecv, recv_dk, prev});
    ops.push_back({P2POp::kSend, dv, next});
    ops.push_back({P2POp::kRecv, recv_dv, prev});
    PKB_RETURN_IF_ERROR(cp.BatchP2P(ops));
    if (step + 1 != w) {
      k = next_k;
      v = next_v;
    }
  }
  return Grads{dq, recv_dk, recv_dv};
}

absl::StatusOr<Grads> BackwardOracle(const std::vector<Shard>& shards, int c, double scale,
                                     bool causal) {
  const int w = static_cast<int>(shards.size());
  auto computes = [&](int rank, int step) { return !causal || step <= rank; };
  // The block that cp rank `rank` computes at `step`: its queries against shard rank - step.
  auto block = [&](int rank, int step) {
    const Shard& s = shards[rank];
    const Shard& kv = shards[(rank - step + w) % w];
    return LocalBackward(s.dout, s.q, kv.k, kv.v, s.out, s.lse, scale, causal && step == 0);
  };
  Grads g;
  for (int step = 0; step < w; ++step) {
    if (!computes(c, step)) continue;
    at::Tensor dq = block(c, step).dq;
    g.dq = g.dq.defined() ? g.dq + dq : dq;
  }
  // Shard c's accumulator starts on rank c at step 0 and visits ranks c + 1, c + 2, ... at steps
  // 1, 2, ..., each adding its block first; it comes home after step W - 1.
  for (int step = 0; step < w; ++step) {
    const int rank = (c + step) % w;
    if (!computes(rank, step)) continue;
    Grads b = block(rank, step);
    g.dk = g.dk.defined() ? b.dk + g.dk : b.dk;
    g.dv = g.dv.defined() ? b.dv + g.dv : b.dv;
  }

  // Direct: every query against every key at once over the concatenated sequence, where the
  // causal mask is the global one.
  std::vector<at::Tensor> dout, q, k, v, out, lse;
  for (const Shard& s : shards) {
    dout.push_back(s.dout);
    q.push_back(s.q);
    k.push_back(s.k);
    v.push_back(s.v);
    out.push_back(s.out);
    lse.push_back(s.lse);
  }
  Grads all = LocalBackward(at::cat(dout, 1), at::cat(q, 1), at::cat(k, 1), at::cat(v, 1),
                            at::cat(out, 1), at::cat(lse, 2), scale, causal);
  const int64_t len = shards[c].q.size(1);
  PKB_RETURN_IF_ERROR(HoldToExact(g.dq, all.dq.narrow(1, c * len, len), "dq", c));
  PKB_RETURN_IF_ERROR(HoldToExact(g.dk, all.dk.narrow(1, c * len, len), "dk", c));
  PKB_RETURN_IF_ERROR(HoldToExact(g.dv, all.dv.narrow(1, c * len, len), "dv", c));
  return g;
}

}  // namespace pkb::ring
