// The vocab-parallel log-prob problems 82-84 share their sizes, their inputs and PKB's top-k /
// top-p filter (`_apply_top_k_top_p`): a vocabulary of 256 split across WORLD, every token's
// full-vocab row filtered in the run dtype, then a log-softmax (82, 83) or its gradient (84).
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

Sizes SizesOf(const RunConfig& cfg);

// 83/84's chunk: cs = min(roundup(max(W, S / 4), W), S) sequence positions, i.e. Bt * cs
// consecutive tokens of the flattened (batch-major) token axis; the last chunk may be shorter.
int64_t ChunkSize(const RunConfig& cfg);

absl::Status CanImplement(const RunConfig& cfg, const char* slug);

// target[b, s] = ((b S + s) * mult + add + set) mod 256, the same on every rank (no RNG).
// logits = randn(Bt, S, Vl) in the dtype, + 8 (in the dtype) at the rank's own target
// entries: PKB's draw. Sets >= 1 then reshape it (kStrong* above).
Inputs DrawLogitsAndTarget(const RunConfig& cfg, int rank, int set, int64_t mult, int64_t add);

// PKB's `_apply_top_k_top_p` on full-vocab rows (R, V) in the dtype: every step in the dtype,
// exactly PKB's ops. `keep` is (top-k kept) & (top-p kept) at the original positions.
struct Filtered {
  at::Tensor logits;  // (R, V) dtype, -inf where dropped
  at::Tensor keep;    // (R, V) bool
};

Filtered ApplyTopKTopP(const at::Tensor& rows, int64_t top_k, double top_p);

// The full-vocab rows of tokens [start, start + count) from every rank's shard, vocab in rank
// order: what the all-to-all delivers, built in one process for oracles.
at::Tensor FullRows(const std::vector<Inputs>& all, int64_t start, int64_t count);

// The fp32 log-probability of each row's target after filtering (82, 83).
at::Tensor TargetLogProbs(const at::Tensor& rows, const at::Tensor& target);

// The vocab-parallel all-to-all of PKB's `_all_to_all_vp_to_seq`: (T, Vl) token rows of this
// rank's vocab shard in, (T / W, V) full-vocab rows of this rank's token block out.
absl::StatusOr<at::Tensor> VocabToSeq(Comm& comm, const at::Tensor& shard_rows);

// 82 and 83 compute the same result (chunking only changes which rank handles a token): the
// oracle filters every token's full row at once, and they share the tolerance and roofline.
std::vector<std::vector<at::Tensor>> LogProbOracle(const std::vector<Inputs>& all,
                                                   const RunConfig& cfg);

Tolerance LogProbTolerance();

Roofline LogProbRoofline(const RunConfig& cfg);

}  // namespace pkb::topk

#endif  // PKB_PROBLEMS_TP_TOPK_FILTER_H_
