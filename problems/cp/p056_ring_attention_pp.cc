// Problem 56 — two pipeline stages of one attention layer each, with causal ring attention over
// the sequence inside each stage (Megatron-LM order, TP = DP = 1): stage 1 takes stage 0's output
// by point-to-point from the rank with the same cp rank.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "problems/cp/ring_attention.h"
#include "problems/harness/common.h"
#include "problems/harness/mesh_groups.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

constexpr int64_t kHeads = 8, kHeadDim = 64, kHidden = kHeads * kHeadDim;

struct Layout {
  int pp, cp;
  int64_t b, s;  // batch and local sequence length
  int CpRank(int r) const { return r % cp; }
  int PpRank(int r) const { return r / cp; }
};

Layout LayoutOf(const RunConfig& cfg) {
  Layout l;
  l.pp = std::min(2, cfg.world);
  l.cp = cfg.world / l.pp;
  l.b = std::max<int64_t>(1, cfg.m / 64);
  l.s = std::max<int64_t>(1, std::max<int64_t>(1, cfg.n / 64) / l.cp);
  return l;
}

// PKB's builder seeds with the default formula, then reseeds with 57's base (not 56's): the
// hidden states by cp rank, the weights by stage. MakeInputs reseeds the same way (cp_rank
// = r % (W / 2) depends on W, which Seed(rank, set) does not see).
uint64_t PkbSeed(uint64_t offset, int set) { return 42 + 57 * 1000ull + offset + 1000003ull * set; }

class RingAttentionPp : public Problem {
 public:
  // 128 x 512: B = M/64, T = N/64; 64 x 64 leaves one position per rank, so T = 8
  // positions and B = 2.
  TestShape CpuTestShape() const override { return {128, 512}; }

  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        56,
        "56_ring_attention_pp",
        1,
        "ring-flash-attention with 2-stage pipeline parallelism, Megatron-LM order (TP = DP = 1)",
        "context parallel",
        R"md(Two pipeline stages, each one attention layer with causal ring attention (problem 54's
ring) over its CP group; stage 1 runs on stage 0's output.

- Layout: pp = min(2, W), cp = W / pp (W = 1 or even). Global rank r has
  cp_rank = r % cp and pp_rank (stage) = r / cp. Group `cp` = {p cp, ..., p cp + cp - 1}
  (contiguous, one per stage), group `pp` = {c, c + cp} (strided). W = 8: cp {0-3},
  {4-7}; pp {0,4},{1,5},{2,6},{3,7}. W = 2: cp {0},{1}; pp {0,1}. W = 1: one stage.
- Sizes: H = 8 heads on every rank, Dh = 64, hidden 512, B = max(1, M/64),
  T = max(1, N/64), S = max(1, T/cp); cp rank c owns positions [c S, (c+1) S).
- Inputs (PKB seeds with 57's base): seed 42 + 57000 + cp_rank + 1000003*set, then
  `hidden_states` (B, S, 512) randn (same on both stages); seed
  42 + 57000 + 20000 + pp_rank + 1000003*set, then `w_qkv` (1536, 512) = randn * 0.02
  and `w_o` (512, 512) = randn * 0.02 (one pair per stage). All in the run dtype on the
  device. Scalars: `num_heads` = 8, `softmax_scale` = 0.125, `causal` = 1.
- Computation per stage: x = hidden_states on stage 0; on stage 1, x = the output of
  global rank r - cp (received point-to-point over `pp`; stage 1's own hidden_states is
  ignored). qkv = x w_qkv^T (dtype) viewed (B, S, 3, 8, 64) -> q, k, v; causal attention
  over the stage's CP group in fp32 (54's ring), cast to dtype -> ctx; out =
  ctx (B, S, 512) w_o^T (dtype). Stage 0 sends out to rank r + cp.
- Output: `out` (B, S, 512) dtype: every rank returns its own stage's output (stage 0
  ranks the intermediate).
- Tolerance: see the output's rationale. Stage 1's outputs are ~0.013 (max ~0.16), so
  PKB's atol 1e-2 would pass zeros there; atol is 1e-3 for every rank.
- Traffic: ring 2 (cp-1) B S 512 b bytes per stage, the stage hop B S 512 b bytes;
  stage 1 waits for stage 0.)md"};
    return i;
  }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    if (cfg.world != 1 && cfg.world % 2 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "56_ring_attention_pp splits the world into 2 pipeline stages (pp = min(2, W), cp = "
          "W / pp) and PKB asserts W % pp == 0; W = ",
          cfg.world, " is neither 1 nor even"));
    }
    return absl::OkStatus();
  }

  std::vector<GroupLayout> Groups(const RunConfig& cfg) const override {
    const Layout l = LayoutOf(cfg);
    return MeshGroups(l.pp, l.cp, "cp", "pp");
  }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    const Layout l = LayoutOf(cfg);
    at::manual_seed(PkbSeed(l.CpRank(rank), set));
    Inputs in;
    in.Add("hidden_states", at::randn({l.b, l.s, kHidden}, Opts(cfg)));
    at::manual_seed(PkbSeed(20000 + l.PpRank(rank), set));
    in.Add("w_qkv", at::randn({3 * kHidden, kHidden}, Opts(cfg)) * 0.02);
    in.Add("w_o", at::randn({kHidden, kHidden}, Opts(cfg)) * 0.02);
    in.scalars.push_back(ScalarArg::Int("num_heads", kHeads));
    in.scalars.push_back(ScalarArg::Float("softmax_scale", ring::DefaultScale(kHeadDim)));
    in.scalars.push_back(ScalarArg::Int("causal", 1));
    return in;
  }

  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    const Layout l = LayoutOf(cfg);
    return {{"out", {l.b, l.s, kHidden}, cfg.dtype}};
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    Comm* cp = comm.Group("cp");
    Comm* pp = comm.Group("pp");
    if (cp == nullptr || pp == nullptr) {
      return absl::FailedPreconditionError("56_ring_attention_pp: the cp / pp groups are missing");
    }
    const int stage = pp->rank(), stages = pp->size();
    at::Tensor x = in[0];
    if (stage > 0) {
      x = at::empty_like(in[0]);
      PKB_RETURN_IF_ERROR(pp->BatchP2P({{P2POp::kRecv, x, stage - 1}}));
    }
    PKB_ASSIGN_OR_RETURN(at::Tensor out, ring::AttentionLayer(*cp, x, in[1], in[2], kHeads,
                                                              ring::DefaultScale(kHeadDim)));
    if (stage + 1 < stages) PKB_RETURN_IF_ERROR(pp->BatchP2P({{P2POp::kSend, out, stage + 1}}));
    return std::vector<at::Tensor>{out};
  }

  // Stage by stage, each CP group's layer in one process; stage 1 starts from stage 0's outputs.
  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    const Layout l = LayoutOf(cfg);
    std::vector<std::vector<at::Tensor>> result(all.size());
    std::vector<at::Tensor> x;
    for (int c = 0; c < l.cp; ++c) x.push_back(all[c][0]);
    for (int p = 0; p < l.pp; ++p) {
      std::vector<at::Tensor> w_qkv, w_o;
      for (int c = 0; c < l.cp; ++c) {
        w_qkv.push_back(all[p * l.cp + c][1]);
        w_o.push_back(all[p * l.cp + c][2]);
      }
      PKB_ASSIGN_OR_RETURN(
          x, ring::AttentionLayerOracle(x, w_qkv, w_o, kHeads, ring::DefaultScale(kHeadDim)));
      for (int c = 0; c < l.cp; ++c) result[p * l.cp + c] = {x[c]};
    }
    return result;
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    Tolerance t;
    t.atol = 1e-3;
    t.rationale =
        "atol = 1e-3, rtol = 1e-2 for every rank (PKB: atol 1e-2). Stage 1's outputs are ~0.013, "
        "max ~0.16, so PKB's atol passes zeros there; 1e-3 rejects them. Correct kernels differ "
        "by bf16 roundings of the projections and of stage 0's output (a few 1e-4 at most); the "
        "ring's merge order and a flash kernel's online softmax in fp32 stay far below it.";
    return t;
  }

  Roofline GetRoofline(const RunConfig& cfg) const override {
    const Layout l = LayoutOf(cfg);
    const double b = ElementBytes(cfg.dtype);
    const double act = l.b * l.s * kHidden * b;  // hidden, out, or one of q, k, v
    Roofline r;
    r.nvlink_bytes = 2 * (l.cp - 1) * act + (l.pp > 1 ? act : 0);
    const double weights = 4.0 * kHidden * kHidden * b;
    // Input and weights read, q, k, v written and read, received k, v written and read, out.
    r.hbm_bytes = act + weights + 6 * act + 4 * (l.cp - 1) * act + act;
    // One stage's projections and the busiest cp rank's cp blocks; the stages run in series.
    r.flops =
        2.0 * l.b * l.s * kHidden * 4 * kHidden + l.cp * 4.0 * l.b * kHeads * l.s * l.s * kHeadDim;
    return r;
  }
};
PKB_REGISTER_PROBLEM(RingAttentionPp);

}  // namespace
}  // namespace pkb
