#include "problems/tp/topk_filter.h"

namespace pkb::topk {

Sizes SizesOf(const RunConfig& cfg) {
  const int64_t w = cfg.world;
  Sizes s;
  s.batch = std::max<int64_t>(1, std::min<int64_t>(cfg.m / 512, 4));
  const int64_t seq = std::max<int64_t>(w, std::min<int64_t>(cfg.m / 128, 32));
  s.seq = (seq + w - 1) / w * w;
  s.local_vocab = kVocab / w;
  s.tokens = s.batch * s.seq;
  return s;
}

int64_t ChunkSize(const RunConfig& cfg) {
  const Sizes s = SizesOf(cfg);
  const int64_t w = cfg.world;
  const int64_t cs = (std::max<int64_t>(w, s.seq / 4) + w - 1) / w * w;
  return std::min(cs, s.seq);
}

absl::Status CanImplement(const RunConfig& cfg, const char* slug) {
  PKB_RETURN_IF_ERROR(RequirePositiveShape(cfg));
  return RequireDivides(cfg.world, kVocab,
                        absl::StrCat(slug,
                                     " shards a vocabulary of 256 (PKB's local vocab is "
                                     "floor(256/W), which truncates the vocabulary and indexes "
                                     "targets out of range otherwise), so the world size must "
                                     "divide it")
                            .c_str());
}

Inputs DrawLogitsAndTarget(const RunConfig& cfg, int rank, int set, int64_t mult, int64_t add) {
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

Filtered ApplyTopKTopP(const at::Tensor& rows, int64_t top_k, double top_p) {
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

at::Tensor FullRows(const std::vector<Inputs>& all, int64_t start, int64_t count) {
  std::vector<at::Tensor> shards;
  for (const Inputs& in : all) {
    shards.push_back(in[0].reshape({-1, in[0].size(-1)}).narrow(0, start, count));
  }
  return at::cat(shards, -1);
}

at::Tensor TargetLogProbs(const at::Tensor& rows, const at::Tensor& target) {
  Filtered f = ApplyTopKTopP(rows, kTopK, kTopP);
  at::Tensor log_probs = at::log_softmax(f.logits.to(at::kFloat), -1);
  return log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1);
}

absl::StatusOr<at::Tensor> VocabToSeq(Comm& comm, const at::Tensor& shard_rows) {
  const int64_t w = comm.size(), t = shard_rows.size(0), vl = shard_rows.size(1);
  at::Tensor send = shard_rows.contiguous();
  at::Tensor recv = at::empty_like(send);
  PKB_RETURN_IF_ERROR(comm.AllToAllSingle(recv, send, {}, {}));
  return recv.view({w, t / w, vl}).permute({1, 0, 2}).reshape({t / w, w * vl});
}

std::vector<std::vector<at::Tensor>> LogProbOracle(const std::vector<Inputs>& all,
                                                   const RunConfig& cfg) {
  const Sizes s = SizesOf(cfg);
  at::Tensor rows = FullRows(all, 0, s.tokens);
  at::Tensor out = TargetLogProbs(rows, all[0][1].reshape({-1}));
  return std::vector<std::vector<at::Tensor>>(all.size(), {out.reshape({s.batch, s.seq})});
}

Tolerance LogProbTolerance() {
  return Tolerance{1e-4, 1e-4, false,
                   "atol = rtol = 1e-4: with the kept set PKB's bf16 top-p decision gives, a "
                   "correct fp32 log-softmax (any summation order, fused) is within ~1e-5; a "
                   "token kept or dropped differently moves the output by >= ~0.01. PKB's "
                   "1e-2 passes all zeros on most of its own inputs."};
}

Roofline LogProbRoofline(const RunConfig& cfg) {
  const Sizes s = SizesOf(cfg);
  const double e = ElementBytes(cfg.dtype), w = cfg.world, tl = s.tokens / w;
  Roofline r;
  r.nvlink_bytes = s.tokens * s.local_vocab * e * (w - 1) / w + (w - 1) * 4 * tl;
  r.hbm_bytes = s.tokens * s.local_vocab * e + 8.0 * s.tokens + 4.0 * s.tokens;
  r.flops = 10.0 * tl * kVocab;  // sort, softmax, cumsum, log-softmax of Tl rows
  return r;
}

}  // namespace pkb::topk
