// Problem 75 — FLA Gated DeltaNet (naive recurrent form) under Ulysses context parallelism:
// an all-to-all trades sequence shards for head shards, each rank runs the gated delta rule
// over the whole sequence of its heads, and a second all-to-all brings the outputs back.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "problems/cp/delta_rule.h"
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

constexpr int64_t kLocalSeq = 64;

struct Dims {
  int64_t heads, key, value;
};

// PKB: H = roundup(6, W), K = 256, V = 512 whatever M and N. Here M, N < 1024 shrink K to M/4
// and V to N/2 for quick tests (M, N >= 1024, the default, is PKB's problem).
Dims Sizes(const RunConfig& cfg) {
  const int64_t w = cfg.world;
  return {(6 + w - 1) / w * w, std::max<int64_t>(1, std::min<int64_t>(cfg.m, 1024) / 4),
          std::max<int64_t>(1, std::min<int64_t>(cfg.n, 1024) / 2)};
}

// x (1, T, Hx, D) -> (Hx, T, D), contiguous.
at::Tensor HeadsFirst(const at::Tensor& x) {
  return x.permute({0, 2, 1, 3}).squeeze(0).contiguous();
}

// PKB's _gated_delta_recurrent on full sequences of `heads` heads: q, k (1, T, Hh, K), v (1, T,
// Hh, V), gate and beta (1, T, Hh), a_log and dt_bias (Hh). Returns (1, T, Hh, V) in q's dtype.
at::Tensor GatedDeltaRule(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& gate, const at::Tensor& beta, const at::Tensor& a_log,
                          const at::Tensor& dt_bias, at::ScalarType ct) {
  const int64_t key = q.size(3);
  const double scale = std::pow(static_cast<double>(key), -0.5);
  at::Tensor qh = HeadsFirst(L2Normalize(q.to(ct), 1e-6) * scale);
  at::Tensor kh = HeadsFirst(L2Normalize(k.to(ct), 1e-6));
  at::Tensor vh = HeadsFirst(v.to(ct));
  at::Tensor decay = -a_log.to(ct).exp() * at::softplus(gate.to(ct) + dt_bias.to(ct));
  at::Tensor alpha = decay.exp().squeeze(0).t().unsqueeze(-1).contiguous();  // (Hh, T, 1)
  at::Tensor b = beta.to(ct).squeeze(0).t().contiguous();                    // (Hh, T)
  at::Tensor state = at::zeros({qh.size(0), key, v.size(3)}, vh.options());
  at::Tensor o = DeltaRuleRecurrence(qh, kh, vh, alpha, b, state);
  return o.unsqueeze(0).permute({0, 2, 1, 3}).contiguous().to(q.scalar_type());
}

class FlaGatedDeltaNetCp : public Problem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        75,
        "75_fla_gated_deltanet_cp",
        1,
        "FLA Gated DeltaNet (naive recurrent form), Ulysses all-to-all context parallelism",
        "context parallel",
        R"md(Gated delta rule over a sequence sharded over WORLD; the reference trades sequence
shards for head shards (Ulysses) and runs each head's recurrence over the whole
sequence.

- Sizes: H = roundup(6, W) heads (Hl = H/W per rank), K = 256, V = 512, local
  sequence 64, global T = 64 W (PKB ignores M, N; here M, N < 1024 shrink K to M/4
  and V to N/2 for quick tests).
- Inputs per rank r, in order: `q`, `k` randn
  (1, 64, H, K); `v` randn (1, 64, H, V); `gate` randn (1, 64, H), all in the run
  dtype; `beta` = sigmoid(randn (1, 64, H) in bfloat16) in bfloat16, cast to the run
  dtype; `a_log` = linspace(0, 0.2, H) and `dt_bias` = linspace(-0.1, 0.1, H), both
  bfloat16 whatever the run dtype, sliced to this rank's heads [r Hl, (r+1) Hl).
  Rank r holds positions [64 r, 64 r + 64) of every head.
- Computation (fp32): q^ = q / max(||q||, 1e-6) / sqrt(K), k^ = k / max(||k||, 1e-6),
  alpha_t = exp(-exp(a_log) softplus(gate_t + dt_bias)) (threshold 20), beta as
  given. Per head, S = 0 (K x V), for t = 0 .. T-1 in global order: S <- alpha_t S;
  u = (v_t - k^_t^T S) beta_t; S <- S + k^_t u^T; o_t = q^_t^T S. Rank r's rows
  depend on every earlier rank's positions through S.
- Output: `o` (1, 64, H, V) run dtype: this rank's positions, all heads.
- Tolerance: atol = 2^-6 / K, rtol = 3u (u = 2^-8 in bf16). |o| is ~1/(2K) (rms
  0.0025, max ~0.04 at PKB's sizes), so PKB's atol = 1e-2 is four times the rms: at
  W = 2 it accepts a run that drops the state carried from the previous rank. See
  GetTolerance.
- Traffic: all-to-all of (W-1)/W 64 H (2K + V + 2) e bytes in and (W-1)/W 64 H V e
  out; 64 W sequential steps of ~8 K V flops per head (latency-bound).)md"};
    return i;
  }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    return RequirePositiveShape(cfg);
  }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    const Dims d = Sizes(cfg);
    const int64_t hl = d.heads / cfg.world;
    const auto bf16 = Opts(cfg).dtype(at::kBFloat16);
    Inputs in;
    in.Add("q", at::randn({1, kLocalSeq, d.heads, d.key}, Opts(cfg)));
    in.Add("k", at::randn({1, kLocalSeq, d.heads, d.key}, Opts(cfg)));
    in.Add("v", at::randn({1, kLocalSeq, d.heads, d.value}, Opts(cfg)));
    in.Add("gate", at::randn({1, kLocalSeq, d.heads}, Opts(cfg)));
    in.Add("beta", at::randn({1, kLocalSeq, d.heads}, bf16).sigmoid().to(cfg.dtype));
    in.Add("a_log", at::linspace(0.0, 0.2, d.heads, bf16).narrow(0, rank * hl, hl).contiguous());
    in.Add("dt_bias", at::linspace(-0.1, 0.1, d.heads, bf16).narrow(0, rank * hl, hl).contiguous());
    return in;
  }

  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    const Dims d = Sizes(cfg);
    return {{"o", {1, kLocalSeq, d.heads, d.value}, cfg.dtype}};
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    const int w = comm.size();
    // (1, 64, H, D) -> (1, 64 W, Hl, D): head block j goes to rank j, sequences arrive in
    // rank order.
    auto seq_to_heads = [&](const at::Tensor& x) -> absl::StatusOr<at::Tensor> {
      const int64_t s = x.size(1), hl = x.size(2) / w, dim = x.size(3);
      at::Tensor send = x.reshape({s, w, hl, dim}).permute({1, 0, 2, 3}).contiguous();
      at::Tensor recv = at::empty_like(send);
      PKB_RETURN_IF_ERROR(comm.AllToAllSingle(recv, send, {}, {}));
      return recv.reshape({1, w * s, hl, dim});
    };
    PKB_ASSIGN_OR_RETURN(at::Tensor q, seq_to_heads(in[0]));
    PKB_ASSIGN_OR_RETURN(at::Tensor k, seq_to_heads(in[1]));
    PKB_ASSIGN_OR_RETURN(at::Tensor v, seq_to_heads(in[2]));
    PKB_ASSIGN_OR_RETURN(at::Tensor gate, seq_to_heads(in[3].unsqueeze(-1)));
    PKB_ASSIGN_OR_RETURN(at::Tensor beta, seq_to_heads(in[4].unsqueeze(-1)));
    at::Tensor o =
        GatedDeltaRule(q, k, v, gate.squeeze(-1), beta.squeeze(-1), in[5], in[6], at::kFloat);
    // (1, 64 W, Hl, V) -> (1, 64, H, V): sequence block j goes back to rank j.
    const int64_t s = kLocalSeq, hl = o.size(2), dim = o.size(3);
    at::Tensor send = o.reshape({w, s, hl, dim}).contiguous();
    at::Tensor recv = at::empty_like(send);
    PKB_RETURN_IF_ERROR(comm.AllToAllSingle(recv, send, {}, {}));
    return std::vector<at::Tensor>{
        recv.permute({1, 0, 2, 3}).reshape({1, s, w * hl, dim}).contiguous()};
  }

  // Every head over the whole sequence (rank order) in one process; rank r keeps its rows.
  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    auto cat = [&](int k, int dim) {
      std::vector<at::Tensor> parts;
      for (const Inputs& in : all) parts.push_back(in[k]);
      return at::cat(parts, dim);
    };
    at::Tensor o = GatedDeltaRule(cat(0, 1), cat(1, 1), cat(2, 1), cat(3, 1), cat(4, 1), cat(5, 0),
                                  cat(6, 0), at::kFloat);
    std::vector<std::vector<at::Tensor>> out;
    for (int r = 0; r < cfg.world; ++r)
      out.push_back({o.narrow(1, r * kLocalSeq, kLocalSeq).contiguous()});
    return out;
  }

  // |o| ~ 1/(2K): q^ k^ ~ N(0, 1/K^2) and u ~ beta v. Another fp32 order (a chunked WY form,
  // state passing across ranks) moves o by ~1e-8 at PKB's sizes (fp64 against fp32: 2e-8);
  // atol = 2^-6/K covers that with room (6e-5 at K = 256, 2.5% of the rms) and still catches
  // a rank's a_log / dt_bias slice missing, while the state dropped at a rank boundary
  // moves the first rows by ~alpha o_rms and fails. Each side may round to bf16 the other
  // way: 2u |o|; rtol = 3u.
  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    const Dims d = Sizes(cfg);
    Tolerance t;
    t.atol = std::ldexp(1.0, -6) / d.key;
    t.rtol = 3 * UnitRoundoff(cfg.dtype);
    t.rationale = absl::StrCat(
        "atol = 2^-6 / K = ", t.atol, ", rtol = 3u = ", t.rtol,
        ". Outputs are ~1/(2K) in size (rms 0.0025 at K = 256), so PKB's 1e-2 is four times "
        "the rms: at W = 2 it accepts dropping the recurrent state carried across a rank "
        "boundary. atol leaves room for another fp32 order (not for q^, k^ rounded to bf16 "
        "before the matmuls: that misses it at W = 8); the two roundings to the output dtype "
        "differ by at most 2u |o|.");
    return t;
  }

  Roofline GetRoofline(const RunConfig& cfg) const override {
    const Dims d = Sizes(cfg);
    const int w = cfg.world;
    const double b = ElementBytes(cfg.dtype), h = d.heads, hl = h / w, t = kLocalSeq * w;
    Roofline r;
    r.nvlink_bytes = (w - 1.0) / w * kLocalSeq * h * (2.0 * d.key + 2.0 * d.value + 2) * b;
    r.hbm_bytes = kLocalSeq * h * (2.0 * d.key + 2.0 * d.value + 2) * b;
    r.flops = 8.0 * d.key * d.value * t * hl;
    return r;
  }
};
PKB_REGISTER_PROBLEM(FlaGatedDeltaNetCp);

}  // namespace
}  // namespace pkb
