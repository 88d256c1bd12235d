// Problem 54 — causal ring attention forward (ring-flash-attention's RingComm schedule and lse
// merge), context parallel over WORLD.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "problems/cp/ring_attention.h"
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

constexpr int64_t kH = 8, kD = 64;

// PKB's _common_attn_dims: B = max(1, M / 64), T = max(1, N / 64); 16 and 16 at the default shape.
int64_t Batch(const RunConfig& cfg) { return std::max<int64_t>(1, cfg.m / 64); }
int64_t Seq(const RunConfig& cfg) { return std::max<int64_t>(1, cfg.n / 64); }
int64_t LocalSeq(const RunConfig& cfg) { return std::max<int64_t>(1, Seq(cfg) / cfg.world); }
double Scale() { return ring::DefaultScale(kD); }

class RingAttention : public Problem {
 public:
  // 128 x 512: B = M/64, T = N/64; 64 x 64 leaves one position per rank, so T = 8
  // positions and B = 2.
  TestShape CpuTestShape() const override { return {128, 512}; }

  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        54,
        "54_ring_attention",
        2,  // 2: B and T follow M and N as in PKB (version 1 fixed them at 16)
        "ring-flash-attention (zhuzilin): RingComm + lse merge",
        "context parallel",
        R"md(Causal ring attention forward over WORLD (context parallel). Sizes from M and N as PKB derives them:
B = max(1, M / 64), T = max(1, N / 64) (global sequence; 16 and 16 at M = N = 1024), H = 8,
Dh = 64, S = max(1, T / W) local positions per rank.
Rank r owns global positions [r S, (r+1) S) (contiguous, no zig-zag).

- Inputs per rank r, randn in the run dtype on the
  device, in order: `q`, `k`, `v`, each (B, S, H, Dh). softmax_scale = Dh^-0.5 = 0.125,
  causal = true.
- Computation: exact causal softmax attention of the local queries over all keys at global
  positions <= the query's, in fp32 (q, k, v upcast), cast to the dtype at the end. The
  reference runs the ring: W steps; at step s the rank holds rank (r - s) mod W's k, v and
  forwards them to r + 1 (batched isend/irecv, receiving from r - 1); for s <= r it
  computes one block (s = 0 diagonal and masked, s >= 1 full) with its logsumexp and merges
  it: o -= sigmoid(lse_b - lse) (o - o_b); lse -= logsigmoid(lse - lse_b).
- Output: `out` (B, S, H, Dh) dtype.
- Numerics: fp32 throughout, |out| <~ 1; merge order changes only fp32 rounding, and a
  flash kernel with bf16 probabilities passes atol = rtol = 1e-2.
- Load: rank r computes r + 1 blocks (imbalanced); ring traffic 2 (W-1) B S H Dh b bytes.
- Needs 8 % W == 0 (PKB's builder).)md"};
    return i;
  }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    if (8 % cfg.world != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "54_ring_attention splits its 8 heads' sequence into equal contiguous blocks and PKB's "
          "builder requires 8 % W == 0 (heads divisible by W); W = ",
          cfg.world, " is not one of 1, 2, 4, 8"));
    }
    return absl::OkStatus();
  }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    const int64_t b = Batch(cfg), s = LocalSeq(cfg);
    Inputs in;
    in.Add("q", at::randn({b, s, kH, kD}, Opts(cfg)));
    in.Add("k", at::randn({b, s, kH, kD}, Opts(cfg)));
    in.Add("v", at::randn({b, s, kH, kD}, Opts(cfg)));
    in.scalars.push_back(ScalarArg::Float("softmax_scale", Scale()));
    in.scalars.push_back(ScalarArg::Int("causal", 1));
    return in;
  }

  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    return {{"out", {Batch(cfg), LocalSeq(cfg), kH, kD}, cfg.dtype}};
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    PKB_ASSIGN_OR_RETURN(at::Tensor out,
                         ring::Forward(comm, in[0], in[1], in[2], Scale(), /*causal=*/true));
    return std::vector<at::Tensor>{out.to(cfg.dtype)};
  }

  // Exact causal attention over the global sequence in fp32, one softmax per rank: rank r's
  // queries against the concatenated keys and values of ranks 0..r (later keys are all masked,
  // so leaving them out is exact). The same blocks merged in the ring's step order must agree
  // with it to fp32 rounding (else the oracle fails); the merged form is returned, so that the
  // oracle is bit-identical to a correct ring on CPU and rank r's answer reads no later rank's
  // inputs (the CPU check's "rank s missing" answer for s > r is then the truth itself).
  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    std::vector<at::Tensor> qs, ks, vs;
    for (const Inputs& in : all) {
      qs.push_back(in[0]);
      ks.push_back(in[1]);
      vs.push_back(in[2]);
    }
    std::vector<std::vector<at::Tensor>> result;
    for (int r = 0; r < static_cast<int>(all.size()); ++r) {
      PKB_ASSIGN_OR_RETURN(at::Tensor out,
                           ring::ForwardOracle(qs, ks, vs, r, Scale(), /*causal=*/true));
      result.push_back({out.to(cfg.dtype)});
    }
    return result;
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    Tolerance t;
    t.rationale =
        "PKB's atol = rtol = 1e-2: fp32 math throughout and |out| <~ 1, so the ring's merge order "
        "and a flash kernel's bf16 probabilities stay far below it.";
    return t;
  }

  Roofline GetRoofline(const RunConfig& cfg) const override {
    const double b = ElementBytes(cfg.dtype);
    const double w = cfg.world;
    const double s = static_cast<double>(LocalSeq(cfg));
    const double batch = static_cast<double>(Batch(cfg));
    const double shard = batch * s * kH * kD * b;
    Roofline r;
    r.nvlink_bytes = 2 * (w - 1) * shard;
    // q, k, v read; every received k, v written and read once; out written.
    r.hbm_bytes = 3 * shard + 4 * (w - 1) * shard + shard;
    // The busiest rank (W - 1) computes W blocks of QK^T and PV.
    r.flops = w * 4.0 * batch * kH * s * s * kD;
    return r;
  }
};
PKB_REGISTER_PROBLEM(RingAttention);

}  // namespace
}  // namespace pkb
