// The vocab-parallel log-prob problems 82-84 share their sizes, their inputs and PKB's top-k /
// top-p filter (`_apply_top_k_top_p`): a vocabulary of 256 split across WORLD, every token's
// full-vocab row filtered in the run dtype, then a log-softmax (82, 83) or its gradient (84).
//
// Header-only: three problem files use it, and the library lists its non-problem sources by
// name.
#ifndef PKB_PROBLEMS_TP_TOPK_FILTER_H_
#define PKB_PROBLEMS_TP_TOPK_FILTER_H_

#include <algorithm>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "problems/harness/common.h"

namespace pkb::topk {

constexpr int64_t kVocab = 256;
constexpr int64_t kTopK = 10;
constexpr double kTopP = 0.9;

// Input sets >= 1 (PKB's set 0 leaves ~93% of tokens with only the target, output exactly 0):
// the logits are scaled by 0.1 and clamped to +-0.45 (in the dtype) and the target logit is set
// to 2.4. The target is then the row's strict maximum (never filtered, so never -inf) with
// p ~0.5, ~8 tokens survive and the output is ~-0.5. Every prefix of three or more top-k terms
// exceeds 0.12 (tested), so the order of summing the bf16 prefix cannot move a decision.
constexpr double kStrongScale = 0.1;
constexpr double kStrongClamp = 0.45;
constexpr double kStrongTarget = 2.4;

// PKB's sizes at the run's M (N is ignored).
struct Sizes {
  int64_t batch;        // Bt = max(1, min(M / 512, 4))
  int64_t seq;          // S = roundup(max(W, min(M / 128, 32)), W)
  int64_t local_vocab;  // Vl = 256 / W
  int64_t tokens;       // T = Bt * S
};

inline Sizes SizesOf(const RunConfig& cfg) {
  const int64_t w = cfg.world;
  Sizes s;
  s.batch = std::max<int64_t>(1, std::min<int64_t>(cfg.m / 512, 4));
  const int64_t seq = std::max<int64_t>(w, std::min<int64_t>(cfg.m / 128, 32));
  s.seq = (seq + w - 1) / w * w;
  s.local_vocab = kVocab / w;
  s.tokens = s.batch * s.seq;
  return s;
}

// 83/84's chunk: cs = min(roundup(max(W, S / 4), W), S) sequence positions, i.e. Bt * cs
// consecutive tokens of the flattened (batch-major) token axis; the last chunk may be shorter.
inline int64_t ChunkSize(const RunConfig& cfg) {
  const Sizes s = SizesOf(cfg);
  const int64_t w = cfg.world;
  const int64_t cs = (std::max<int64_t>(w, s.seq / 4) + w - 1) / w * w;
  return std::min(cs, s.seq);
}

inline absl::Status CanImplement(const RunConfig& cfg, const char* slug) {
  PKB_RETURN_IF_ERROR(RequirePositiveShape(cfg));
  return RequireDivides(cfg.world, kVocab,
                        absl::StrCat(slug,
                                     " shards a vocabulary of 256 (PKB's local vocab is "
                                     "floor(256/W), which truncates the vocabulary and indexes "
                                     "targets out of range otherwise), so the world size must "
                                     "divide it")
                            .c_str());
}

// target[b, s] = ((b S + s) * mult + add + set) mod 256, the same on every rank (no RNG).
// logits = randn(Bt, S, Vl) in the dtype, + 8 (in the dtype) at the rank's own target
// entries: PKB's draw. Sets >= 1 then reshape it (kStrong* above).
inline Inputs DrawLogitsAndTarget(const RunConfig& cfg, int rank, int set, int64_t mult,
                                  int64_t add) {
  const Sizes s = SizesOf(cfg);
  at::Tensor logits = at::randn({s.batch, s.seq, s.local_vocab}, Opts(cfg));
  at::Tensor tokens = at::arange(s.tokens, Opts(cfg).dtype(at::kLong));
  at::Tensor target = (tokens * mult + add + set).remainder(kVocab).reshape({s.batch, s.seq});
  at::Tensor vocab = at::arange(s.local_vocab, Opts(cfg).dtype(at::kLong)) + rank * s.local_vocab;
  at::Tensor mask = vocab.view({1, 1, -1}).eq(target.unsqueeze(-1));
  if (set == 0) {
    logits = logits + mask.to(cfg.dtype) * 8.0;
  } else {
    logits = (logits * kStrongScale).clamp(-kStrongClamp, kStrongClamp);
    logits = logits.masked_fill(mask, kStrongTarget);
  }
  Inputs in;
  in.Add("vocab_parallel_logits", logits.contiguous());
  in.Add("target", target.contiguous());
  return in;
}

// PKB's `_apply_top_k_top_p` on full-vocab rows (R, V) in the dtype: every step in the dtype,
// exactly PKB's ops. `keep` is (top-k kept) & (top-p kept) at the original positions.
struct Filtered {
  at::Tensor logits;  // (R, V) dtype, -inf where dropped
  at::Tensor keep;    // (R, V) bool
};

inline Filtered ApplyTopKTopP(const at::Tensor& rows, int64_t top_k, double top_p) {
  const double inf = std::numeric_limits<double>::infinity();
  const int64_t v = rows.size(-1);
  // Stable ascending sort: ties keep their vocab order (PyTorch's CUDA sort of 256-wide rows is
  // a stable radix sort, so PKB's default sort is stable too).
  auto [sorted, idx] = rows.sort(/*stable=*/true, /*dim=*/-1, /*descending=*/false);
  const int64_t k = std::min(top_k, v);
  at::Tensor threshold = sorted.narrow(-1, v - k, 1);
  at::Tensor top_k_mask = sorted.ge(threshold);
  sorted = sorted.masked_fill(top_k_mask.logical_not(), -inf);
  // The top-p decision in the dtype: softmax rounded to the dtype, cumsum in the dtype, and the
  // comparison with the Python float 1 - top_p, which PyTorch converts to the dtype first
  // (0.10009765625 in bf16), as a wrapped scalar does here.
  at::Tensor probs = sorted.softmax(-1);
  at::Tensor top_p_mask = at::cumsum(probs, -1).gt(1.0 - top_p);
  top_p_mask.select(-1, v - 1).fill_(true);
  sorted = sorted.masked_fill(top_p_mask.logical_not(), -inf);
  at::Tensor keep = top_p_mask.logical_and(top_k_mask);
  return {sorted.scatter(-1, idx, sorted), keep.scatter(-1, idx, keep)};
}

// The full-vocab rows of tokens [start, start + count) from every rank's shard, vocab in rank
// order: what the all-to-all delivers, built in one process for oracles.
inline at::Tensor FullRows(const std::vector<Inputs>& all, int64_t start, int64_t count) {
  std::vector<at::Tensor> shards;
  for (const Inputs& in : all) {
    shards.push_back(in[0].reshape({-1, in[0].size(-1)}).narrow(0, start, count));
  }
  return at::cat(shards, -1);
}

// The fp32 log-probability of each row's target after filtering (82, 83).
inline at::Tensor TargetLogProbs(const at::Tensor& rows, const at::Tensor& target) {
  Filtered f = ApplyTopKTopP(rows, kTopK, kTopP);
  at::Tensor log_probs = at::log_softmax(f.logits.to(at::kFloat), -1);
  return log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1);
}

// The vocab-parallel all-to-all of PKB's `_all_to_all_vp_to_seq`: (T, Vl) token rows of this
// rank's vocab shard in, (T / W, V) full-vocab rows of this rank's token block out.
inline absl::StatusOr<at::Tensor> VocabToSeq(Comm& comm, const at::Tensor& shard_rows) {
  const int64_t w = comm.size(), t = shard_rows.size(0), vl = shard_rows.size(1);
  at::Tensor send = shard_rows.contiguous();
  at::Tensor recv = at::empty_like(send);
  PKB_RETURN_IF_ERROR(comm.AllToAllSingle(recv, send, {}, {}));
  return recv.view({w, t / w, vl}).permute({1, 0, 2}).reshape({t / w, w * vl});
}

// 82 and 83 compute the same result (chunking only changes which rank handles a token): the
// oracle filters every token's full row at once, and they share the tolerance and roofline.
inline std::vector<std::vector<at::Tensor>> LogProbOracle(const std::vector<Inputs>& all,
                                                          const RunConfig& cfg) {
  const Sizes s = SizesOf(cfg);
  at::Tensor rows = FullRows(all, 0, s.tokens);
  at::Tensor out = TargetLogProbs(rows, all[0][1].reshape({-1}));
  return std::vector<std::vector<at::Tensor>>(all.size(), {out.reshape({s.batch, s.seq})});
}

inline Tolerance LogProbTolerance() {
  return Tolerance{1e-4, 1e-4, false,
                   "atol = rtol = 1e-4: with the kept set PKB's bf16 top-p decision gives, a "
                   "correct fp32 log-softmax (any summation order, fused) is within ~1e-5; a "
                   "token kept or dropped differently moves the output by >= ~0.01. PKB's "
                   "1e-2 passes all zeros on most of its own inputs."};
}

inline Roofline LogProbRoofline(const RunConfig& cfg) {
  const Sizes s = SizesOf(cfg);
  const double e = ElementBytes(cfg.dtype), w = cfg.world, tl = s.tokens / w;
  Roofline r;
  r.nvlink_bytes = s.tokens * s.local_vocab * e * (w - 1) / w + (w - 1) * 4 * tl;
  r.hbm_bytes = s.tokens * s.local_vocab * e + 8.0 * s.tokens + 4.0 * s.tokens;
  r.flops = 10.0 * tl * kVocab;  // sort, softmax, cumsum, log-softmax of Tl rows
  return r;
}

}  // namespace pkb::topk

#endif  // PKB_PROBLEMS_TP_TOPK_FILTER_H_
