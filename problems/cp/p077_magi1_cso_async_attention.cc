// Problem 77 — MAGI-1's context-shuffle-overlap (CSO) attention: Ulysses-style head/sequence
// all-to-all around a non-causal GQA attention over 4 key ranges, pipelined range by range.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

constexpr int64_t kRanges = 4;  // cp_shuffle_num
constexpr int64_t kHeadDim = 128;
constexpr double kStrongQueryScale = 2.0;  // sets > 0: scores with std 2 instead of 1

struct Dims {
  int64_t hq, hkv, lc, spb, t;  // heads, kv heads, range length, tokens per block, local tokens
  int64_t hkv_sent;             // kv heads after PKB repeats them up to W (Hkv < W, W % Hkv == 0)
};

// PKB's sizes. They ignore M and N; here N < 1024 shrinks the range length Lc by N/1024 (at
// least 1) so that CPU tests stay quick (N >= 1024, the default, is PKB's problem).
Dims Sizes(const RunConfig& cfg) {
  const int64_t w = cfg.world;
  Dims d;
  d.hq = w <= 4 ? 24 : 48;
  const int64_t lc = w <= 4 ? 12150 : 21600;
  if (d.hq % w != 0) d.hq = w * std::max<int64_t>(1, d.hq / w);
  d.hkv = 8;
  if (d.hkv % w != 0 && w % d.hkv != 0) d.hkv = w;
  d.lc = std::max<int64_t>(1, lc * std::min<int64_t>(cfg.n, 1024) / 1024);
  d.spb = (d.lc + w - 1) / w;
  d.t = kRanges * d.spb;
  d.hkv_sent = (d.hkv < w && w % d.hkv == 0) ? w : d.hkv;
  return d;
}

at::ScalarType AttnDtype(const RunConfig& cfg) {
  return cfg.dtype == at::kHalf ? at::kBFloat16 : cfg.dtype;  // PKB: fp16 runs use bf16
}

// Non-causal SDPA of q (Lq, Hq', d) over k, v (Lk, Hk', d) with GQA (query head a uses kv head
// a / (Hq' / Hk')), returning (Lq, Hq', d).
at::Tensor Attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  at::Tensor qh = q.unsqueeze(0).transpose(1, 2);
  at::Tensor kh = k.unsqueeze(0).transpose(1, 2);
  at::Tensor vh = v.unsqueeze(0).transpose(1, 2);
  if (kh.size(1) < qh.size(1)) {
    const int64_t rep = qh.size(1) / kh.size(1);
    kh = kh.repeat_interleave(rep, 1);
    vh = vh.repeat_interleave(rep, 1);
  }
  return at::scaled_dot_product_attention(qh, kh, vh).squeeze(0).transpose(0, 1).contiguous();
}

class Magi1CsoAsyncAttention : public Problem {
 public:
  // PKB's sizes are fixed and shrink below M, N = 1024: N = 2 shrinks the ranges to
  // Lc = 42 keys at W = 8 (clipping bites at W = 2, 4, 8).
  TestShape CpuTestShape() const override { return {64, 2}; }

  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        77,
        "77_magi1_cso_async_attention",
        1,
        "MAGI-1 (Sand AI) context-shuffle-overlap attention",
        "context parallel",
        R"md(Ulysses-style context-parallel attention over WORLD, pipelined over 4 key ranges.

- Sizes: R = 4 ranges, d = 128. W <= 4: Hq = 24, Lc = 12150; W > 4: Hq = 48,
  Lc = 21600. If W does not divide Hq, Hq = W * max(1, Hq / W). Hkv = 8, unless
  neither 8 % W nor W % 8 is 0 (then Hkv = W). spb = ceil(Lc / W), T = 4 spb local
  tokens (10800 at W = 8). PKB ignores M, N; here N < 1024 shrinks Lc by N/1024 for
  quick tests (N >= 1024, the default, is PKB's problem).
- Inputs per rank r, dtype Da = bf16 (fp32/fp64
  runs use the run dtype), in order: `query` = randn(T, Hq, 128); key = randn(T, Hkv,
  128), value = randn_like(key), `key_value` = cat(key, value, -1) (T, Hkv, 256);
  `k_ranges` int64 (4, 2) = [[i Lc, (i+1) Lc]]. Non-tensor: cp_shuffle_num = 4,
  clip_token_nums = Lc. Input set 0 is PKB's. Sets > 0 multiply `query` by 2 after the
  draw (exact): scores get std 2 and outputs ~0.06 instead of ~0.012 (sqrt(e^4 / Lc)
  vs sqrt(e / Lc)), so that a wrong answer cannot hide in the tolerance.
- Layout: rank r's tokens are 4 blocks of spb; block i holds positions
  [r spb, (r+1) spb) of range i. Range i's keys/values are the rank-order concatenation
  of every rank's block i, clipped to the first Lc tokens.
- Computation (PKB): a2a of the KV head groups (Hkv/W heads each; repeated up to W
  heads first when Hkv < W), regroup by range and clip. For each range i: a2a of the
  query block (head group j to rank j), non-causal softmax(Q K^T / sqrt(128)) V over
  range i's Lc keys with query head h using kv head floor(h Hkv / Hq), a2a of the
  result back. PKB overlaps range i+1's query a2a with range i's output a2a (scheduling
  only).
- Output: `out` Da (T, Hq, 128): out[i spb + s, h] = Attn(query[i spb + s, h]; K_i, V_i).
- Tolerance: |d| <= atol + 1e-2 |o|, atol = max(1e-3, 4 u sqrt(min(1, e^4 / Lc)))
  (u = 2^-8; ~1e-3 at PKB's Lc: a flash kernel rounds P to bf16, an error of about
  u sqrt(sum w^2 v^2)). PKB's atol 1e-2 is about one output standard
  deviation on its own inputs (outputs average 12k-22k values); 1e-3 admits fp32 or
  flash-style bf16 attention (P rounded to bf16, any key order) and rejects a 1.5% scale
  error, another range's keys, a wrong GQA head map or unclipped keys.
- Traffic: (W-1)/W (T Hkv' 256 + 2 T Hq 128) e bytes per rank (Hkv' = kv heads after
  the repeat); FLOPs 16 spb Lc Hq 128 per rank (5.7 T at W = 8).)md"};
    return i;
  }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    PKB_RETURN_IF_ERROR(RequirePositiveShape(cfg));
    const Dims d = Sizes(cfg);
    const int64_t w = cfg.world;
    if (d.hkv_sent % w != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "77_magi1_cso_async_attention splits ", d.hkv_sent, " kv heads across W = ", w,
          " ranks (PKB raises: KV heads must divide evenly across context ranks)"));
    }
    const int64_t lq = d.hq / w, lkv = d.hkv_sent / w;
    if (lq % lkv != 0 || d.hq % d.hkv != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("77_magi1_cso_async_attention's GQA needs the ", lq,
                       " local query heads to be a "
                       "multiple of the ",
                       lkv, " local kv heads at W = ", w));
    }
    if (!at::isFloatingType(cfg.dtype)) {
      return absl::InvalidArgumentError("77_magi1_cso_async_attention needs a floating dtype");
    }
    return absl::OkStatus();
  }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    const Dims d = Sizes(cfg);
    auto opts = Opts(cfg).dtype(AttnDtype(cfg));
    at::Tensor query = at::randn({d.t, d.hq, kHeadDim}, opts);
    at::Tensor key = at::randn({d.t, d.hkv, kHeadDim}, opts);
    at::Tensor value = at::randn_like(key);
    if (set > 0) query = query * kStrongQueryScale;
    at::Tensor starts = at::arange(kRanges, Opts(cfg).dtype(at::kLong)) * d.lc;
    Inputs in;
    in.Add("query", query.contiguous());
    in.Add("key_value", at::cat({key, value}, -1).contiguous());
    in.Add("k_ranges", at::stack({starts, starts + d.lc}, 1).contiguous());
    in.scalars.push_back(ScalarArg::Int("cp_shuffle_num", kRanges));
    in.scalars.push_back(ScalarArg::Int("clip_token_nums", d.lc));
    return in;
  }

  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    const Dims d = Sizes(cfg);
    return {{"out", {d.t, d.hq, kHeadDim}, AttnDtype(cfg)}};
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    const Dims d = Sizes(cfg);
    const int64_t w = comm.size(), spb = d.spb, lq = d.hq / w;
    // KV: head group j of every local token to rank j; block j of the result is rank j's tokens.
    at::Tensor kv = in[1];
    if (d.hkv_sent != d.hkv) kv = kv.repeat_interleave(d.hkv_sent / d.hkv, 1);
    const int64_t lkv = d.hkv_sent / w, width = kv.size(2);
    at::Tensor kv_send = kv.reshape({d.t, w, lkv, width}).permute({1, 0, 2, 3}).contiguous();
    at::Tensor kv_recv = at::empty_like(kv_send);
    PKB_RETURN_IF_ERROR(comm.AllToAllSingle(kv_recv, kv_send, {}, {}));
    // (source rank, range, spb) -> (range, rank-order tokens), clipped to Lc.
    at::Tensor by_range = kv_recv.reshape({w, kRanges, spb, lkv, width})
                              .permute({1, 0, 2, 3, 4})
                              .reshape({kRanges, w * spb, lkv, width})
                              .narrow(1, 0, d.lc)
                              .reshape({kRanges * d.lc, lkv, width});
    at::Tensor key = by_range.narrow(2, 0, kHeadDim);
    at::Tensor value = by_range.narrow(2, kHeadDim, kHeadDim);

    // Query blocks by range, destination rank first.
    at::Tensor q_blocks = in[0].reshape({kRanges, spb, w, lq, kHeadDim}).permute({0, 2, 1, 3, 4});
    at::Tensor k_ranges = in[2].to(at::kCPU);
    std::vector<at::Tensor> outs;
    for (int64_t i = 0; i < kRanges; ++i) {
      at::Tensor q_send = q_blocks[i].contiguous();
      at::Tensor q_local = at::empty_like(q_send);
      PKB_RETURN_IF_ERROR(comm.AllToAllSingle(q_local, q_send, {}, {}));
      const int64_t start = k_ranges[i][0].item<int64_t>(), end = k_ranges[i][1].item<int64_t>();
      at::Tensor o = Attend(q_local.reshape({w * spb, lq, kHeadDim}),
                            key.narrow(0, start, end - start), value.narrow(0, start, end - start));
      at::Tensor o_back = at::empty_like(o);
      PKB_RETURN_IF_ERROR(comm.AllToAllSingle(o_back, o, {}, {}));
      outs.push_back(o_back);
    }
    // (range, source rank = head group, spb, lq, d) -> (range, spb, all heads, d).
    at::Tensor out = at::stack(outs)
                         .reshape({kRanges, w, spb, lq, kHeadDim})
                         .permute({0, 2, 1, 3, 4})
                         .reshape({d.t, d.hq, kHeadDim});
    return std::vector<at::Tensor>{out.contiguous()};
  }

  // Range i's keys and values gathered from every rank's block i and clipped, every rank's
  // queries of that range attended over them with all Hq heads at once, in fp32 (the exact
  // answer, rounded once to Da).
  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    const Dims d = Sizes(cfg);
    std::vector<std::vector<at::Tensor>> blocks(all.size());
    for (int64_t i = 0; i < kRanges; ++i) {
      std::vector<at::Tensor> kv_parts;
      for (const auto& in : all) kv_parts.push_back(in[1].narrow(0, i * d.spb, d.spb));
      at::Tensor kv = at::cat(kv_parts, 0).narrow(0, 0, d.lc);
      at::Tensor key = kv.narrow(2, 0, kHeadDim), value = kv.narrow(2, kHeadDim, kHeadDim);
      for (size_t r = 0; r < all.size(); ++r) {
        at::Tensor q = all[r][0].narrow(0, i * d.spb, d.spb).to(at::kFloat);
        blocks[r].push_back(
            Attend(q, key.to(at::kFloat), value.to(at::kFloat)).to(all[r][0].scalar_type()));
      }
    }
    std::vector<std::vector<at::Tensor>> out;
    for (auto& b : blocks) out.push_back({at::cat(b, 0)});
    return out;
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    const Dims d = Sizes(cfg);
    // sum_j w_j^2 of a softmax over Lc scores with std 2 (the stronger sets): e^4 / Lc.
    const double spread = std::sqrt(std::min(1.0, std::exp(4.0) / double(d.lc)));
    Tolerance t;
    t.atol = std::max(1e-3, 4 * UnitRoundoff(AttnDtype(cfg)) * spread);
    t.rtol = 1e-2;
    t.rationale =
        "Outputs average Lc = 12k-22k values: ~N(0, 0.012^2) on PKB's inputs, so PKB's atol "
        "1e-2 is about one standard deviation. A flash kernel rounds P to bf16: an output "
        "error of about u sqrt(sum_j w_j^2 v_j^2), with sum w^2 ~ e^4 / Lc on the stronger sets "
        "(scores std 2), so atol = max(1e-3, 4 u sqrt(min(1, e^4 / Lc))) = ~1e-3 at PKB's Lc "
        "(larger only for the small test shapes); fp32 attention and any key order pass, "
        "wrong keys, head maps or clipping fail.";
    return t;
  }

  // libtorch's CPU SDPA kernel for bf16 is less accurate than a GPU flash kernel (which scores
  // in fp32 and rounds only P): on the peaked stronger sets it strays from the exact fp32 oracle
  // by a few percent. The CPU tests hold the reference to the oracle this loosely; candidates
  // are held to GetTolerance against the GPU reference, and the CPU tests' wrong answers too.
  Tolerance OracleTolerance(const RunConfig& cfg, int index) const override {
    Tolerance t;
    t.atol = 5e-3;
    t.rtol = 5e-2;
    t.rationale = "CPU bf16 SDPA against the fp32 oracle (see OracleTolerance).";
    return t;
  }

  Roofline GetRoofline(const RunConfig& cfg) const override {
    const Dims d = Sizes(cfg);
    const double e = ElementBytes(AttnDtype(cfg)), w = cfg.world;
    const double kv = double(d.t) * d.hkv_sent * 2 * kHeadDim, q = double(d.t) * d.hq * kHeadDim;
    Roofline r;
    r.nvlink_bytes = (w - 1) / w * (kv + 2 * q) * e;
    r.hbm_bytes = (double(d.t) * d.hkv * 2 * kHeadDim + 2 * q) * e +
                  double(kRanges) * d.lc * d.hkv_sent / w * 2 * kHeadDim * e;
    r.flops = 16.0 * d.spb * d.lc * d.hq * kHeadDim;
    return r;
  }
};
PKB_REGISTER_PROBLEM(Magi1CsoAsyncAttention);

}  // namespace
}  // namespace pkb
