// The expert-parallel MoE forward shared by problems 31, 32, 49, 50 and 51 (VeOmni's
// token_pre_all2all / tokens_post_all2all), and its single-process oracle.
//
// Pipeline over an EP group of W ranks with E experts (L = E / W local experts, rank d hosting
// experts [d L, (d+1) L)):
//   1. logits = x Wg^T + bg (dtype); p = softmax(logits) (dtype); (w, sel) = topk(p, k), no renorm.
//   2. counts c[e] (int64, E); input_splits[d] = sum of c over d's experts.
//   3. all_gather_into_tensor of c -> G (W, E); output_splits[s] = sum_{e local} G[s, e].
//   4. permute: (expert, token) pairs, expert-major, tokens ascending; X_perm = x[token].
//   5. all_to_all_single with the variable splits (skipped at W = 1).
//   6. regroup the received chunks from (source, local expert) to (local expert, source) order.
//   7. Y = expert(X) with the rank's weights (every op in dtype).
//   8. undo 6, all_to_all_single back with the splits swapped.
//   9. each row (e, t) times p[t, e] (dtype), scatter-added into zeros (T, N) dtype at row t.
// Problems 28 and 29 are steps 4-6 and 8-9 alone, with given routing and synthetic splits.
//
// Ties (problems/harness/ties.h): where a token's k-th probability equals that of an expert left
// out, torch.topk may pick any of the tied experts (its CUDA and CPU kernels differ), and the
// token goes to another rank's MLP. Every such choice is correct: MoeEpProblem's tie rule
// computes the output row of each other valid choice and accepts a candidate's row that matches
// one of them within the tolerance.
#ifndef PKB_PROBLEMS_EP_MOE_PIPELINE_H_
#define PKB_PROBLEMS_EP_MOE_PIPELINE_H_

#include <ATen/ATen.h>

#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "problems/harness/comm.h"
#include "problems/harness/problem.h"
#include "problems/harness/ties.h"

namespace pkb {

// A default-initialized nn.Linear(in -> out) as PKB builds it: created on the CPU in fp32 from the
// CPU generator (weight (out, in) by kaiming_uniform_(a = sqrt(5)), then bias (out) by
// U(-1/sqrt(in), 1/sqrt(in))), then cast to the run dtype and moved to the run device.
struct LinearWeights {
  at::Tensor weight;  // (out, in)
  at::Tensor bias;    // (out)
};
LinearWeights DrawLinear(const RunConfig& cfg, int64_t in_features, int64_t out_features);

// y = x W^T + b in the weights' dtype.
inline at::Tensor ApplyLinear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  return at::linear(x, w, b);
}

// The SwiGLU expert of 31/49/50/51: down(silu(gate(x)) * up(x)), each op rounded to dtype.
at::Tensor SwiGluExpert(const at::Tensor& x, const LinearWeights& gate, const LinearWeights& up,
                        const LinearWeights& down);

// The pieces of the pipeline that problems 28 and 29 (the dispatch and combine halves alone)
// share with it.

// The host copy of a small integral-valued tensor (Python's .tolist()).
std::vector<int64_t> ToHostLongs(const at::Tensor& t);

// torch.cat([chunks[i] for i in order]) of torch.split(x, sizes) along dim 0.
at::Tensor SortChunks(const at::Tensor& x, const std::vector<int64_t>& sizes,
                      const std::vector<int64_t>& order);

// Chunk orders of the regrouping (step 6) for W ranks with L local experts. Received chunks
// come as (source s, local expert l) at index s L + l; ToExpertMajor lists them in (l, s) order.
// ToSourceMajor is its inverse (step 8): chunk l W + s back to position s L + l.
std::vector<int64_t> ToExpertMajor(int64_t world, int64_t local);
std::vector<int64_t> ToSourceMajor(int64_t world, int64_t local);

// Step 4's index: the tokens t of the pairs with routing_map[e, t] != 0 ((E, T), any dtype),
// expert-major and ascending within an expert.
at::Tensor PermutedTokenIndices(const at::Tensor& routing_map);

// PKB's top-k routing draw of problems 28 and 29: for each of `tokens` tokens in turn, randperm(
// experts) (int64) on the run device, whose first k entries are the token's experts in slot
// order. Returns them as (tokens, k) int64. The meta device, which lists input shapes and has no
// randperm, gets the shape only.
at::Tensor DrawDistinctExperts(const RunConfig& cfg, int64_t tokens, int64_t experts, int64_t k);

// Step 9: row i of `rows` (pair i = (e, t) of routing_map in PermutedTokenIndices order) times
// the routing weight of token t for expert e (weights/selected (T, k), no duplicate experts per
// token), rounded to dtype, scatter-added into zeros (T, N) dtype at row t.
at::Tensor UnpermuteCombine(const at::Tensor& rows, const at::Tensor& weights,
                            const at::Tensor& selected, const at::Tensor& routing_map,
                            const at::Tensor& sorted_idx);

// Maps the rows a rank received (R, N) to expert outputs (R, N) with that rank's weights.
using ExpertFn = std::function<at::Tensor(const at::Tensor&)>;

struct Routing {
  at::Tensor weights;   // (T, k) dtype, topk of the softmax, descending
  at::Tensor selected;  // (T, k) int64 expert ids
};
// Step 1's probabilities (T, E): softmax in dtype of the dtype logits.
at::Tensor RouterProbs(const at::Tensor& x2d, const at::Tensor& gate_weight,
                       const at::Tensor& gate_bias);
// Step 1, exactly as the reference computes it (bf16 logits, softmax in dtype, topk).
Routing Route(const at::Tensor& x2d, const at::Tensor& gate_weight, const at::Tensor& gate_bias,
              int64_t top_k);

// Steps 1-9 on one rank over `comm` (the EP group). `x` is (..., N); the result is (T, N).
absl::StatusOr<at::Tensor> MoeEpForward(Comm& comm, const at::Tensor& x,
                                        const at::Tensor& gate_weight, const at::Tensor& gate_bias,
                                        int64_t num_experts, int64_t top_k, const ExpertFn& expert);

// The closed form for rank `rank` of the group, without collectives:
//   out[t] = sum over j (in ascending expert order) of w[t,j] * expert_{owner(sel[t,j])}(x[t]),
// each product rounded to dtype, summed in dtype. experts[d] is group rank d's expert.
at::Tensor MoeEpOracle(const at::Tensor& x, const at::Tensor& gate_weight,
                       const at::Tensor& gate_bias, int64_t num_experts, int64_t top_k,
                       const std::vector<ExpertFn>& experts);

// The closed form for given routing (weights, selected) (T, k) of the tokens x2d (T, N): each
// pair's expert output times its weight (in the experts' output dtype, promoted with the
// weights'), summed per token in ascending expert order. Hazard tests pass other routings and
// experts (fp32 chains, standard mistakes) through it.
at::Tensor MoeEpCombine(const at::Tensor& x2d, const at::Tensor& weights,
                        const at::Tensor& selected, int64_t num_experts,
                        const std::vector<ExpertFn>& experts);

// The valid routings that ties allow besides the reference's own. For each token, the experts
// whose probability exceeds the k-th are chosen, and any k - (their number) of the experts equal
// to the k-th complete the choice. A choice counts when it sends the token to another multiset
// of owners (expert e's owner is e / local) than topk's: the output depends on nothing else.
// Listed by token ascending, then by the choices in lexicographic order of their experts.
struct TieChoices {
  std::vector<int64_t> token;                  // the token of each alternative
  std::vector<std::vector<int64_t>> selected;  // its k experts, ascending
};
TieChoices RoutingTieChoices(const at::Tensor& probs, const Routing& route, int64_t local);

// The end-to-end problems 31, 32, 49, 50 and 51 (VeOmni's fused EP MoE forward), which differ only
// in the expert count, top-k, the EP group layout and the expert MLP. Each rank's inputs, in call
// order: hidden_states x (M, N), gate_weight (E, N), gate_bias (E) (randn on the device), then
// default nn.Linear gate_proj N -> 128, up_proj N -> 128, down_proj 128 -> N from the CPU
// generator (each as its weight and bias), then any expert extras (32's LoRA factors); scalars
// num_experts, top_k. The EP groups are contiguous blocks of EpSize ranks ("ep"; WORLD when a
// block is all of WORLD). The output is out (M, N) in the run dtype.
//
// The tie rule: rank r's keys are the tokens of its other valid routings (RoutingTieChoices)
// (A,) int64 and their output rows (A, N) in the run dtype, the closed form with the group's
// experts applied to the tied tokens. ResolveTies replaces a candidate's row that misses the
// reference's but matches an alternative's (every element within the tolerance) by the
// reference's row. TieKeys: the group gathers its tied tokens (padded to the largest count),
// every member applies its expert to all of them, and the results are gathered; OracleTieKeys
// builds the same batches, so the keys agree bit for bit.
enum : size_t { kMoeX, kMoeGateW, kMoeGateB, kMoeGpW, kMoeGpB, kMoeUpW, kMoeUpB, kMoeDnW, kMoeDnB };
constexpr int64_t kMoeInter = 128;  // I, the experts' intermediate size

// The statements' paragraph on routing ties (31, 49-51).
inline constexpr char kMoeTiesText[] =
    R"md(- TIES: any valid tie choice passes. Exact bf16 ties occur (a few tokens per rank):
  where a token's k-th probability equals that of an expert left out, torch.topk
  may pick any of the tied experts (its CUDA and CPU kernels may differ), and the
  token goes to that expert's rank. The harness computes the output row of every
  such choice and accepts a row that matches any one of them within the tolerance.
  A token sent to an expert below the k-th probability, or to every tied one, fails.
)md";

class MoeEpProblem : public Problem, public TieRule {
 public:
  // Problems 31, 32, 49-51: M = 1024. There the ranks' routings have exact bf16 ties
  // at the k-th value, so the tie keys (gathered tied tokens, every member's expert on them) are
  // compared with the oracle's on real alternatives; at M = 64 most ranks have none.
  TestShape CpuTestShape() const override { return {1024, 64}; }

  std::vector<GroupLayout> Groups(const RunConfig& cfg) const override;
  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override;
  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override;
  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override;
  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override;
  Roofline GetRoofline(const RunConfig& cfg) const override;

  absl::StatusOr<std::vector<at::Tensor>> TieKeys(
      Comm& comm, const Inputs& in, const RunConfig& cfg,
      const std::vector<at::Tensor>& expected) const override;
  absl::StatusOr<std::vector<std::vector<at::Tensor>>> OracleTieKeys(
      const std::vector<Inputs>& all, const RunConfig& cfg,
      const std::vector<std::vector<at::Tensor>>& expected) const override;
  absl::StatusOr<std::vector<at::Tensor>> ResolveTies(
      const RunConfig& cfg, const std::vector<at::Tensor>& expected,
      const std::vector<at::Tensor>& keys, const std::vector<at::Tensor>& actual) const override;

  virtual int64_t NumExperts(int world) const = 0;
  virtual int64_t TopK(int world) const { return 2; }
  // Ranks per EP group; the groups are the blocks {g P, ..., g P + P - 1}. WORLD by default.
  virtual int EpSize(int world) const { return world; }

 protected:
  // Draws the expert's inputs after the three Linear layers (none by default).
  virtual void AddExpertExtras(const RunConfig& cfg, int set, Inputs& in) const {}
  // The expert of the rank whose inputs are `in` (the SwiGLU MLP by default).
  virtual ExpertFn ExpertOf(const Inputs& in) const;
  // FLOPs of the expert per received row beyond the SwiGLU's 6 N I.
  virtual double ExtraExpertFlopsPerRow(const RunConfig& cfg) const { return 0; }

 private:
  // The EP group's communicator: `comm` (WORLD) or its "ep" sub-group.
  absl::StatusOr<Comm*> EpComm(Comm& comm) const;
};

}  // namespace pkb

#endif  // PKB_PROBLEMS_EP_MOE_PIPELINE_H_
