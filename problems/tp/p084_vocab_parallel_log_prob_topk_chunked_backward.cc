// Problem 84 — the gradient of problem 83's log-prob with respect to the vocab-parallel
// logits: per chunk, an all-to-all to full-vocab rows, PKB's top-k / top-p filter with its keep
// mask, g = grad_out * keep * (onehot(target) - softmax), and an all-to-all back to vocab
// shards.
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "problems/harness/common.h"
#include "problems/harness/registry.h"
#include "problems/harness/ties.h"
#include "problems/tp/topk_filter.h"

namespace pkb {
namespace {

// g for full-vocab rows (R, V): grad_out * keep * (1[v = target] - p), p the fp32 softmax of
// the filtered row, in PKB's order of fp32 ops.
at::Tensor Gradient(const at::Tensor& rows, const at::Tensor& target, const at::Tensor& grad_out) {
  topk::Filtered f = topk::ApplyTopKTopP(rows, topk::kTopK, topk::kTopP);
  at::Tensor g = at::softmax(f.logits.to(at::kFloat), -1).neg();
  at::Tensor col = target.unsqueeze(-1);
  g.scatter_(-1, col, g.gather(-1, col) + 1.0);
  g.mul_(grad_out.unsqueeze(-1));
  g.mul_(f.keep);
  // PKB leaves -0.0 where a zero meets a negative factor; +0.0 here (the sign of a zero is not
  // compared), so that an all-zero shard is bitwise all zeros.
  return g.add_(0.0);
}

// The ties at each row's top-p cut, for the tie rule. The kept entries are a suffix of the
// sorted row, so the cut's value s is the smallest kept logit; of the m entries equal to s the
// filter keeps n, and the sort's order of equal logits decided which (ties keep vocab order
// here; torch.sort without stable = true may order them otherwise). Every choice of n gives the
// same kept values, so the same softmax: a kept one holds v = -p grad_output, a dropped one 0.
// Rows where m > n, and the target is not among the m (its entry differs), have a choice.
struct CutTies {
  at::Tensor run;    // (R, V) bool: the m entries equal to s, in rows with a choice
  at::Tensor count;  // (R, 3) float64: m, n, v (zeros in rows without a choice)
};

CutTies TiesAtCut(const at::Tensor& rows, const at::Tensor& target, const at::Tensor& grad_out) {
  topk::Filtered f = topk::ApplyTopKTopP(rows, topk::kTopK, topk::kTopP);
  at::Tensor g = Gradient(rows, target, grad_out);
  at::Tensor s = rows.masked_fill(f.keep.logical_not(), std::numeric_limits<double>::infinity())
                     .amin(-1, /*keepdim=*/true);
  at::Tensor run = rows.eq(s);
  at::Tensor kept = run.logical_and(f.keep);
  at::Tensor m = run.sum(-1), n = kept.sum(-1);
  at::Tensor target_in = run.gather(-1, target.unsqueeze(-1)).squeeze(-1);
  at::Tensor choice = m.gt(n).logical_and(target_in.logical_not());
  at::Tensor v = g.gather(-1, kept.to(at::kInt).argmax(-1, /*keepdim=*/true)).squeeze(-1);
  at::Tensor count = at::stack({m.to(at::kDouble), n.to(at::kDouble), v.to(at::kDouble)}, -1);
  return {run.logical_and(choice.unsqueeze(-1)).contiguous(),
          count.masked_fill(choice.logical_not().unsqueeze(-1), 0).contiguous()};
}

// Rank r's keys from every token's full row: its vocab columns of the run, and the counts.
std::vector<at::Tensor> CutTieKeys(const CutTies& ties, int64_t rank, const topk::Sizes& s) {
  at::Tensor run = ties.run.narrow(1, rank * s.local_vocab, s.local_vocab);
  return {run.contiguous().reshape({s.batch, s.seq, s.local_vocab}), ties.count};
}

// Whether c is within the tolerance of the reference value e.
bool Within(double c, double e, const Tolerance& tol) {
  return std::abs(c - e) <= tol.atol + tol.rtol * std::abs(e);  // NaN: false
}

class VocabParallelLogProbTopkChunkedBackward : public Problem, public TieRule {
 public:
  // M = 2560: M = 64 leaves one token per rank and one chunk; 2560 gives 80-96
  // tokens and 3-4 chunks (the last one shorter at W = 2, 4).
  TestShape CpuTestShape() const override { return {2560, 64}; }

  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        84,
        "84_vocab_parallel_log_prob_topk_chunked_backward",
        2,
        "generic (RL post-training: backward of the top-k/top-p log-prob with a vocab-parallel "
        "LM head, in sequence chunks)",
        "tensor parallel",
        R"md(Gradient of problem 83's log-prob (top-k 10 / top-p 0.9 over a vocabulary of 256 split
across WORLD, in chunks of the token axis) with respect to the vocab-parallel logits.

- W must divide 256. Bt = max(1, min(M/512, 4)), S = roundup(max(W, min(M/128, 32)),
  W), Vl = 256/W, T = Bt*S tokens (flattened batch-major). N is ignored.
- Inputs per rank r (drawn on the device):
  `vocab_parallel_logits` (Bt, S, Vl) run dtype: randn, then + 8 (in the dtype) where
  r*Vl + v == target (PKB's set 0); `target` (Bt, S) int64 = ((b*S + s)*19 + 5 + set)
  mod 256 on every rank; `grad_output` (Bt, S) bfloat16 (whatever the run dtype) =
  linspace(-1, 1, T) on every rank (no RNG). Non-tensor: `top_k` = 10, `top_p` = 0.9,
  `chunk_size` cs = min(roundup(max(W, S/4), W), S). PKB's tp_group None is omitted.
- Computation: walk the flattened tokens in consecutive pieces of Bt*cs tokens (the
  last may be shorter; its length is a multiple of W). For each piece of P tokens,
  Pl = P/W:
  1. all-to-all: rank j gets full-vocab rows (vocab in rank order) of the piece's
     tokens [j*Pl, (j+1)*Pl).
  2. Filter each row in the run dtype as problem 82 does: ascending sort (the
     reference's is stable: ties keep vocab order; see TIES), -inf below the 10th
     largest (ties kept), softmax rounded to the dtype, cumsum in
     the dtype, keep where c > dtype(1 - 0.9) (0.10009765625 in bf16), always keep the
     largest. keep = top-k kept AND top-p kept, at vocab positions.
  3. p = softmax of the filtered row in fp32 (0 where dropped);
     g[v] = ((1[v = target] - p[v]) * grad_output[token]) * keep[v], in fp32.
  4. all-to-all back: vocab block j of every row goes to rank j, rows in the piece's
     token order.
- Output: `grad_logits` (Bt, S, Vl) float32: the gradient for this rank's vocab shard
  of every token. A candidate may group tokens differently (per token the value is
  the same), as long as each row lands at its token.
- TIES: any valid tie order passes. Where the top-p cut falls inside a run of equal
  logits, the sort's order of those entries decides which of them are kept (the
  reference's stable sort keeps the later vocab positions); any of them may be kept,
  as long as the number kept is the filter's: the kept values, so the softmax, are the
  same. The harness maps such a choice onto the reference's before comparing. Keeping
  more or fewer of the run, or another token, fails.
- THE bf16 TOP-P DECISION IS PART OF THE SPEC (see problem 82). Summing the prefix in
  fp32 and rounding once matches PyTorch's bf16
  cumsum on the sets >= 1 (no prefix of three or more terms lies near the threshold).
- Input sets >= 1: the same randn, then logits = clamp(logits * 0.1, -0.45, 0.45) (in
  the dtype) and the target entry set to 2.4 (the strict row maximum): ~8 tokens
  survive, so rows are non-zero, and bf16 ties are common. On PKB's set 0 ~93% of
  rows are all zero (only the target survives and its 1 - p is exactly 0).
- Tolerance: atol 1e-5, rtol 1e-4. The same kept set gives the same fp32 softmax up
  to ~1e-7 relative (any order of the sum); a token kept or dropped differently moves
  a row's entries by >= ~1e-3.
- Traffic: per piece two all-to-alls, P*Vl dtype values out and P*Vl fp32 values back
  ((W-1)/W of each leaves the rank); latency-bound.)md"};
    return i;
  }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    return topk::CanImplement(cfg, "84_vocab_parallel_log_prob_topk_chunked_backward");
  }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    const topk::Sizes s = topk::SizesOf(cfg);
    Inputs in = topk::DrawLogitsAndTarget(cfg, rank, set, /*mult=*/19, /*add=*/5);
    in.Add("grad_output", at::linspace(-1.0, 1.0, s.tokens, Opts(cfg).dtype(at::kBFloat16))
                              .reshape({s.batch, s.seq}));
    in.scalars.push_back(ScalarArg::Int("top_k", topk::kTopK));
    in.scalars.push_back(ScalarArg::Float("top_p", topk::kTopP));
    in.scalars.push_back(ScalarArg::Int("chunk_size", topk::ChunkSize(cfg)));
    return in;
  }

  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    const topk::Sizes s = topk::SizesOf(cfg);
    return {{"grad_logits", {s.batch, s.seq, s.local_vocab}, at::kFloat}};
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    const topk::Sizes s = topk::SizesOf(cfg);
    const int64_t w = comm.size(), piece = s.batch * topk::ChunkSize(cfg);
    at::Tensor logits = in[0].reshape({s.tokens, -1}), target = in[1].reshape({-1});
    at::Tensor grad_out = in[2].reshape({-1});
    std::vector<at::Tensor> pieces;
    for (int64_t start = 0; start < s.tokens; start += piece) {
      const int64_t p = std::min(piece, s.tokens - start), pl = p / w;
      const int64_t mine = start + comm.rank() * pl;
      PKB_ASSIGN_OR_RETURN(at::Tensor rows, topk::VocabToSeq(comm, logits.narrow(0, start, p)));
      at::Tensor g = Gradient(rows, target.narrow(0, mine, pl), grad_out.narrow(0, mine, pl));
      // PKB's _all_to_all_seq_to_vp: vocab block j of every row to rank j.
      at::Tensor send = g.reshape({pl, w, s.local_vocab}).permute({1, 0, 2}).contiguous();
      at::Tensor recv = at::empty_like(send);
      PKB_RETURN_IF_ERROR(comm.AllToAllSingle(recv, send, {}, {}));
      pieces.push_back(recv.reshape({p, s.local_vocab}));
    }
    return std::vector<at::Tensor>{at::cat(pieces).reshape({s.batch, s.seq, s.local_vocab})};
  }

  // Every token's full row at once; rank r's output is its vocab columns.
  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    const topk::Sizes s = topk::SizesOf(cfg);
    at::Tensor rows = topk::FullRows(all, 0, s.tokens);
    at::Tensor g = Gradient(rows, all[0][1].reshape({-1}), all[0][2].reshape({-1}));
    std::vector<std::vector<at::Tensor>> out;
    for (size_t r = 0; r < all.size(); ++r) {
      at::Tensor mine = g.narrow(1, static_cast<int64_t>(r) * s.local_vocab, s.local_vocab);
      out.push_back({mine.contiguous().reshape({s.batch, s.seq, s.local_vocab})});
    }
    return out;
  }

  // The tie rule's keys: every rank gathers the full rows (verification only) and finds the
  // ties at each row's cut (TiesAtCut).
  absl::StatusOr<std::vector<at::Tensor>> TieKeys(
      Comm& comm, const Inputs& in, const RunConfig& cfg,
      const std::vector<at::Tensor>& expected) const override {
    const topk::Sizes s = topk::SizesOf(cfg);
    const int64_t w = comm.size();
    at::Tensor shard = in[0].reshape({s.tokens, s.local_vocab}).contiguous();
    at::Tensor all = at::empty({w * s.tokens, s.local_vocab}, shard.options());
    PKB_RETURN_IF_ERROR(comm.AllGatherInto(all, shard));
    at::Tensor rows = all.view({w, s.tokens, s.local_vocab})
                          .permute({1, 0, 2})
                          .reshape({s.tokens, w * s.local_vocab});
    CutTies ties = TiesAtCut(rows.contiguous(), in[1].reshape({-1}), in[2].reshape({-1}));
    return CutTieKeys(ties, comm.rank(), s);
  }

  absl::StatusOr<std::vector<std::vector<at::Tensor>>> OracleTieKeys(
      const std::vector<Inputs>& all, const RunConfig& cfg,
      const std::vector<std::vector<at::Tensor>>& expected) const override {
    const topk::Sizes s = topk::SizesOf(cfg);
    CutTies ties = TiesAtCut(topk::FullRows(all, 0, s.tokens), all[0][1].reshape({-1}),
                             all[0][2].reshape({-1}));
    std::vector<std::vector<at::Tensor>> out;
    for (size_t r = 0; r < all.size(); ++r) {
      out.push_back(CutTieKeys(ties, static_cast<int64_t>(r), s));
    }
    return out;
  }

  // Per row, the candidate's entries on this rank's part of the run: each within the
  // tolerance of v (kept) or of 0 (dropped), and a count of kept ones that the other ranks'
  // parts of the run can complete to n (between n - (m - here) and min(n, here)). Then they
  // take the reference's values. A count that is wrong over all ranks changes the softmax's
  // denominator, so the row's other kept entries (the target's at least, never in the run)
  // fail wherever they are.
  absl::StatusOr<std::vector<at::Tensor>> ResolveTies(
      const RunConfig& cfg, const std::vector<at::Tensor>& expected,
      const std::vector<at::Tensor>& keys, const std::vector<at::Tensor>& actual) const override {
    const topk::Sizes s = topk::SizesOf(cfg);
    if (keys.size() != 2 || actual.size() != 1 || expected.size() != 1) {
      return absl::InternalError("84: ResolveTies takes 2 keys and 1 output");
    }
    if (actual[0].sizes() != expected[0].sizes() ||
        actual[0].scalar_type() != expected[0].scalar_type()) {
      return actual;  // the comparison rejects it anyway
    }
    const at::Tensor run = keys[0].to(at::kCPU).reshape({s.tokens, s.local_vocab}).contiguous();
    const at::Tensor count = keys[1].to(at::kCPU).contiguous();
    const at::Tensor want =
        expected[0].to(at::kCPU).reshape({s.tokens, s.local_vocab}).contiguous();
    at::Tensor got = actual[0].to(at::kCPU).reshape({s.tokens, s.local_vocab}).contiguous().clone();
    const Tolerance tol = GetTolerance(cfg, 0);
    const bool* in_run = run.const_data_ptr<bool>();
    const double* c = count.const_data_ptr<double>();
    const float* e = want.const_data_ptr<float>();
    float* a = got.mutable_data_ptr<float>();
    for (int64_t t = 0; t < s.tokens; ++t) {
      const int64_t m = static_cast<int64_t>(c[3 * t]), n = static_cast<int64_t>(c[3 * t + 1]);
      const double v = c[3 * t + 2];
      int64_t here = 0, kept = 0, either = 0;
      bool valid = true;
      for (int64_t j = 0; j < s.local_vocab; ++j) {
        const int64_t i = t * s.local_vocab + j;
        if (!in_run[i]) continue;
        ++here;
        const bool as_kept = Within(a[i], v, tol), as_dropped = Within(a[i], 0.0, tol);
        if (as_kept && as_dropped) {
          ++either;
        } else if (as_kept) {
          ++kept;
        } else if (!as_dropped) {
          valid = false;
        }
      }
      if (here == 0 || !valid) continue;
      const int64_t lo = std::max<int64_t>(0, n - (m - here)), hi = std::min(n, here);
      if (kept > hi || kept + either < lo) continue;
      for (int64_t j = 0; j < s.local_vocab; ++j) {
        const int64_t i = t * s.local_vocab + j;
        if (in_run[i]) a[i] = e[i];
      }
    }
    return std::vector<at::Tensor>{
        got.reshape({s.batch, s.seq, s.local_vocab}).to(actual[0].device())};
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    return Tolerance{1e-5, 1e-4, false,
                     "atol 1e-5, rtol 1e-4: with the kept set PKB's bf16 top-p decision gives "
                     "(any members of a run of equal logits at the cut: the tie rule maps them "
                     "onto the reference's), a correct fp32 softmax and product (any order) is "
                     "within ~1e-7 relative; a token kept or dropped differently moves the "
                     "row's entries by >= ~1e-3 (|grad_output| >= 1/(T-1))."};
  }

  Roofline GetRoofline(const RunConfig& cfg) const override {
    const topk::Sizes s = topk::SizesOf(cfg);
    const double e = ElementBytes(cfg.dtype), w = cfg.world, tl = s.tokens / w;
    Roofline r;
    r.nvlink_bytes = s.tokens * s.local_vocab * (e + 4) * (w - 1) / w;
    r.hbm_bytes = s.tokens * s.local_vocab * (e + 4) + 10.0 * s.tokens;
    r.flops = 14.0 * tl * topk::kVocab;
    return r;
  }
};
PKB_REGISTER_PROBLEM(VocabParallelLogProbTopkChunkedBackward);

}  // namespace
}  // namespace pkb
