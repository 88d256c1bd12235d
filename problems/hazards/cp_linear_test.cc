// Hazard tests of the context-parallel long-sequence operators: the Hyena long FFT convolution
// (72) and the FLA delta-rule recurrences (74, 75), whose outputs depend on every earlier
// position of the sequence held by other ranks (see hazards.h).
#include <algorithm>
#include <cmath>

#include "problems/cp/delta_rule.h"
#include "problems/hazards/hazards.h"

namespace pkb::hazards {
namespace {

bool Runnable(int id, int world, int64_t m = 1024, int64_t n = 1024,
              at::ScalarType dtype = at::kBFloat16) {
  auto p = FindProblem(id);
  REQUIRE(p.ok());
  RunConfig cfg;
  cfg.m = m;
  cfg.n = n;
  cfg.world = world;
  cfg.dtype = dtype;
  return (*p)->CanImplement(cfg).ok();
}

// --- 72_hyena_forward_cp -----------------------------------------------------------------------

// Position of natural chunk g in the rank-order concatenation of the local sequences.
int64_t Slot72(int64_t g, int w) { return g < w ? 2 * g : 2 * (2 * w - 1 - g) + 1; }

// The global problem of one case: natural-order (C, S) sequences, the filter and bias.
struct Global72 {
  at::Tensor x1, x2, v, h, bias;
  int w = 1;
  int64_t lc = 0;
};

Global72 Assemble72(const Case& c, bool zigzag = true) {
  Global72 g;
  g.w = c.cfg.world;
  g.lc = c.all[0][0].size(2) / 2;
  auto global = [&](int k) {
    std::vector<at::Tensor> local;
    for (const Inputs& in : c.all) local.push_back(in[k][0]);
    at::Tensor cat = at::cat(local, 1);  // (C, S) in zigzag chunk order
    if (!zigzag) return cat;             // a contiguous reading of the layout (wrong)
    std::vector<at::Tensor> chunks;
    for (int q = 0; q < 2 * g.w; ++q) chunks.push_back(cat.narrow(1, Slot72(q, g.w) * g.lc, g.lc));
    return at::cat(chunks, 1);
  };
  g.x1 = global(0);
  g.x2 = global(1);
  g.v = global(2);
  g.h = c.all[0][3];  // the same on every rank
  g.bias = c.all[0][4];
  return g;
}

// Rank r's output (1, L, C) from a natural-order (C, S) result: chunks r and 2W-1-r.
at::Tensor Layout72(const at::Tensor& z, int w, int64_t lc, int r, bool zigzag = true) {
  const int64_t a = zigzag ? r : 2 * r, b = zigzag ? 2 * w - 1 - r : 2 * r + 1;
  return at::cat({z.narrow(1, a * lc, lc), z.narrow(1, b * lc, lc)}, 1).t().unsqueeze(0);
}

// The first S outputs of the circular convolution of length n (zero-padded u) in `ct`: by an FFT
// of size n (PKB's), or of size `fft` >= S + F - 1 (the linear convolution, folded modulo n).
at::Tensor CircConv(const at::Tensor& u, const at::Tensor& h, int64_t n, int64_t fft,
                    at::ScalarType ct) {
  const int64_t s = u.size(-1), f = h.size(-1);
  at::Tensor lin = at::fft_irfft(at::fft_rfft(u.to(ct), fft) * at::fft_rfft(h.to(ct), fft), fft);
  at::Tensor y = lin.narrow(-1, 0, s).clone();
  if (fft == n) return y;
  REQUIRE(fft >= s + f - 1);
  const int64_t wrap = std::min<int64_t>(s, s + f - 1 - n);  // lin[t + n] exists for t < wrap
  if (wrap > 0) y.narrow(-1, 0, wrap).add_(lin.narrow(-1, n, wrap));
  return y;
}

// The same convolution as a direct fp32 sum (conv1d), on the sequence extended by its wrapped
// tail: no FFT at all.
at::Tensor DirectConv(const at::Tensor& u, const at::Tensor& h, int64_t n) {
  const int64_t s = u.size(-1), f = h.size(-1);
  at::Tensor padded = at::constant_pad_nd(u.to(at::kFloat), {0, n - s});
  at::Tensor ext = at::cat({padded.narrow(-1, n - (f - 1), f - 1), padded.narrow(-1, 0, s)}, -1);
  return at::conv1d(ext.unsqueeze(0), h.to(at::kFloat).flip(-1).unsqueeze(1), {}, 1,
                    at::IntArrayRef{0}, 1, h.size(0))
      .squeeze(0);
}

// z = x1 * dt(y + u b) for a candidate y of channels `ch`.
at::Tensor Finish72(const Global72& g, const at::Tensor& ch, const at::Tensor& y,
                    bool bias = true) {
  at::Tensor u = (g.x2 * g.v).index_select(0, ch);
  at::Tensor full =
      bias ? y.to(at::kFloat) +
                 u.to(at::kFloat) * g.bias.index_select(0, ch).to(at::kFloat).unsqueeze(-1)
           : y.to(at::kFloat);
  return g.x1.index_select(0, ch) * full.to(g.x1.scalar_type());
}

// Whether every rank's output on channels `ch` passes (tolerance, or PKB's 1e-2 with `pkb`).
bool AllRanksPass(const Case& c, const Global72& g, const at::Tensor& ch, const at::Tensor& z,
                  bool pkb = false, bool zigzag = true) {
  bool ok = true;
  for (int r = 0; r < g.w; ++r) {
    at::Tensor want = c.truth[r][0].index_select(2, ch);
    at::Tensor got = Layout72(z, g.w, g.lc, r, zigzag);
    ok = ok && (pkb ? PassesPkb(got, want) : Passes(c, 0, got, want));
  }
  return ok;
}

TEST_CASE("p072 needs W | C and no float16, PKB's shapes on the meta device", "[p072]") {
  for (int w : {1, 2, 4, 8}) CHECK(Runnable(72, w));
  for (int w : {3, 5, 6, 7}) CHECK_FALSE(Runnable(72, w));
  CHECK_FALSE(Runnable(72, 8, 1024, 1024, at::kHalf));
  CHECK(Runnable(72, 8, 1024, 1024, at::kFloat));
  auto p = FindProblem(72);
  REQUIRE(p.ok());
  RunConfig cfg;
  cfg.world = 8;
  cfg.device = at::Device(at::kMeta);
  for (int set : {0, 1}) {
    Inputs meta = (*p)->MakeInputs(cfg, 5, set);
    CHECK(meta[0].sizes() == at::IntArrayRef({1, 1024, 2048}));
    CHECK(meta[3].sizes() == at::IntArrayRef({1024, 4096}));
    CHECK(meta[4].sizes() == at::IntArrayRef({1024}));
  }
  CHECK((*p)->Outputs(cfg, 5)[0].shape == std::vector<int64_t>({1, 2048, 1024}));
}

TEST_CASE("p072 PKB's filter is bf16(arange)/F on every rank, sets >= 1 share a random one",
          "[p072]") {
  auto p = FindProblem(72);
  REQUIRE(p.ok());
  RunConfig cfg;
  cfg.world = 2;
  Inputs r0 = DrawInputs(**p, cfg, 0, 0), r1 = DrawInputs(**p, cfg, 1, 0);
  at::Tensor h = r1[3];
  CHECK(h[0][5].item<float>() == 5.0f / 4096);
  CHECK(h[1023][4095].item<float>() == 1024.0f);  // 4194303 rounds to 2^22 in bf16
  CHECK(h[1000][7].item<float>() == 1000.0f);     // 4096000 + 7: the bf16 spacing is 16384
  CHECK(r1[4][1023].item<float>() == 1.0f);       // 1023 rounds to 1024 in bf16
  CHECK(Same(r0[3], h));
  Case t1 = Prepare(72, 64, 64, 4, 1);
  CHECK(Same(t1.all[0][3], t1.all[3][3]));
  CHECK(Same(t1.all[0][4], t1.all[3][4]));
  CHECK(t1.all[0][3].to(at::kFloat).std().item<double>() > 16);  // C/2 = 32
}

// Full PKB sizes (W = 8 with PKB's filter, W = 1 with a random one): the fp32 FFT of PKB against
// the exact (fp64) convolution, an fp32 FFT of twice the size and a direct fp32 convolution (on 8
// channels: low, middle, high) all pass; at W = 8 PKB's 1e-2 rejects PKB's own fp32 FFT against the
// exact convolution.
TEST_CASE("p072 other convolution orders and precisions pass at PKB's sizes", "[p072]") {
  for (auto [w, set] : std::vector<std::pair<int, int>>{{8, 0}, {1, 1}}) {
    INFO("W = " << w << ", set " << set);
    Case c = Prepare(72, 1024, 1024, w, set);
    Global72 g = Assemble72(c);
    const int64_t s = g.x1.size(1), n = 2 * s;
    at::Tensor all = at::arange(1024);
    at::Tensor u = (g.x2 * g.v).to(at::kFloat);
    at::Tensor pkb = CircConv(u, g.h, n, n, at::kFloat);
    CHECK(AllRanksPass(c, g, all, Finish72(g, all, pkb)));
    CHECK(AllRanksPass(c, g, all, Finish72(g, all, CircConv(u, g.h, n, 2 * n, at::kFloat))));
    if (w == 8) CHECK_FALSE(AllRanksPass(c, g, all, Finish72(g, all, pkb), /*pkb=*/true));
    at::Tensor some = at::tensor({0, 1, 2, 511, 512, 1021, 1022, 1023}, at::kLong);
    at::Tensor direct = DirectConv(u.index_select(0, some), g.h.index_select(0, some), n);
    CHECK(AllRanksPass(c, g, some, Finish72(g, some, direct)));
  }
}

// The standard mistakes: each rank convolving only its own chunks (the previous ranks'
// contribution missing), a contiguous reading of the zigzag layout, a linear convolution at
// W = 1 (no wrap-around), a circular convolution of length S, and on sets >= 1 (where PKB's
// nearly constant filter cannot show them) a filter shifted by one tap and a missing bias.
TEST_CASE("p072 missing earlier chunks, wrong layout or boundary, shifted filter fail", "[p072]") {
  for (int w : {1, 2, 8}) {
    for (int set : {0, 1}) {
      INFO("W = " << w << ", set " << set);
      Case c = Prepare(72, 256, 128, w, set);
      Global72 g = Assemble72(c);
      const int64_t s = g.x1.size(1), n = 2 * s, f = g.h.size(1);
      at::Tensor all = at::arange(256);
      at::Tensor u = (g.x2 * g.v).to(at::kFloat);
      CHECK(AllRanksPass(c, g, all, Finish72(g, all, CircConv(u, g.h, n, n, at::kFloat))));
      if (w == 1) {
        CHECK_FALSE(AllRanksPass(
            c, g, all, Finish72(g, all, CircConv(u, g.h, 2 * n + f, 2 * n + f, at::kFloat))));
      } else {
        // Rank r's chunks alone, zeros elsewhere: the previous ranks' part is missing.
        bool any_fail = false;
        for (int r = 0; r < w; ++r) {
          at::Tensor mask = at::zeros({1, s});
          mask.narrow(1, r * g.lc, g.lc).fill_(1);
          mask.narrow(1, (2 * w - 1 - r) * g.lc, g.lc).fill_(1);
          at::Tensor z = Finish72(g, all, CircConv(u * mask, g.h, n, n, at::kFloat));
          any_fail = any_fail || !Passes(c, 0, Layout72(z, w, g.lc, r), c.truth[r][0]);
        }
        CHECK(any_fail);
        Global72 flat = Assemble72(c, /*zigzag=*/false);
        at::Tensor uf = (flat.x2 * flat.v).to(at::kFloat);
        CHECK_FALSE(AllRanksPass(c, flat, all,
                                 Finish72(flat, all, CircConv(uf, flat.h, n, n, at::kFloat)), false,
                                 /*zigzag=*/false));
        CHECK_FALSE(AllRanksPass(c, g, all, Finish72(g, all, CircConv(u, g.h, s, n, at::kFloat))));
      }
      if (set == 1) {
        at::Tensor shifted = at::constant_pad_nd(g.h.narrow(1, 1, f - 1), {0, 1});
        CHECK_FALSE(
            AllRanksPass(c, g, all, Finish72(g, all, CircConv(u, shifted, n, n, at::kFloat))));
        CHECK_FALSE(
            AllRanksPass(c, g, all, Finish72(g, all, CircConv(u, g.h, n, n, at::kFloat), false)));
      }
    }
  }
}

// --- 74 and 75: the delta rule across CP ranks ---------------------------------------------------

// A head-major delta-rule problem: q, k (H, T, K), v (H, T, V), decay (H, T, K or 1), beta (H, T).
struct DeltaInputs {
  at::Tensor q, k, v, decay, beta;
};

// The recurrence run chunk by chunk (one chunk per CP rank, `chunk` positions each), carrying
// the state from one chunk to the next, or restarting from zero (`carry` false: the mistake).
// Returns (1, T, H, V) in `dtype`.
at::Tensor Chunked(const DeltaInputs& d, int64_t chunk, bool carry, at::ScalarType dtype) {
  const int64_t t_len = d.q.size(1);
  at::Tensor state = at::zeros({d.q.size(0), d.q.size(2), d.v.size(2)}, d.v.options());
  std::vector<at::Tensor> parts;
  for (int64_t s = 0; s < t_len; s += chunk) {
    if (!carry) state.zero_();
    auto piece = [&](const at::Tensor& x) { return x.narrow(1, s, chunk); };
    parts.push_back(DeltaRuleRecurrence(piece(d.q), piece(d.k), piece(d.v), piece(d.decay),
                                        piece(d.beta), state));
  }
  return at::cat(parts, 1).unsqueeze(0).permute({0, 2, 1, 3}).to(dtype).contiguous();
}

at::Tensor HeadsFirst(const at::Tensor& x) {
  return x.permute({0, 2, 1, 3}).squeeze(0).contiguous();
}

// The tensors of inputs `k` of `ranks`, concatenated along the sequence (dim 1).
at::Tensor SeqOf(const Case& c, const std::vector<int>& ranks, int k) {
  std::vector<at::Tensor> parts;
  for (int r : ranks) parts.push_back(c.all[r][k]);
  return at::cat(parts, 1);
}

// --- 75_fla_gated_deltanet_cp ------------------------------------------------------------------

// 75's preprocessing in `ct` over the whole sequence (every head).
DeltaInputs Prep75(const Case& c, at::ScalarType ct) {
  std::vector<int> ranks(c.cfg.world);
  for (int r = 0; r < c.cfg.world; ++r) ranks[r] = r;
  at::Tensor q = SeqOf(c, ranks, 0).to(ct), k = SeqOf(c, ranks, 1).to(ct);
  std::vector<at::Tensor> a, dtb;
  for (const Inputs& in : c.all) {
    a.push_back(in[5]);
    dtb.push_back(in[6]);
  }
  DeltaInputs d;
  d.q = HeadsFirst(L2Normalize(q, 1e-6) * std::pow(static_cast<double>(q.size(3)), -0.5));
  d.k = HeadsFirst(L2Normalize(k, 1e-6));
  d.v = HeadsFirst(SeqOf(c, ranks, 2).to(ct));
  at::Tensor gate = SeqOf(c, ranks, 3).to(ct);
  at::Tensor decay = -at::cat(a).to(ct).exp() * at::softplus(gate + at::cat(dtb).to(ct));
  d.decay = decay.exp().squeeze(0).t().unsqueeze(-1).contiguous();
  d.beta = SeqOf(c, ranks, 4).to(ct).squeeze(0).t().contiguous();
  return d;
}

bool AllRanksPass75(const Case& c, const at::Tensor& o, bool pkb = false) {
  bool ok = true;
  for (int r = 0; r < c.cfg.world; ++r) {
    at::Tensor mine = o.narrow(1, 64 * r, 64);
    ok = ok && (pkb ? PassesPkb(mine, c.truth[r][0]) : Passes(c, 0, mine, c.truth[r][0]));
  }
  return ok;
}

TEST_CASE("p075 any W with H = roundup(6, W), each rank gets its heads' a_log, dt_bias", "[p075]") {
  for (int w : {1, 2, 3, 4, 5, 6, 7, 8}) CHECK(Runnable(75, w));
  auto p = FindProblem(75);
  REQUIRE(p.ok());
  RunConfig cfg;
  cfg.device = at::Device(at::kMeta);
  for (auto [w, heads] : std::vector<std::pair<int, int64_t>>{{1, 6}, {4, 8}, {5, 10}, {8, 8}}) {
    cfg.world = w;
    Inputs meta = (*p)->MakeInputs(cfg, w - 1, 0);
    CHECK(meta[0].sizes() == at::IntArrayRef({1, 64, heads, 256}));
    CHECK(meta[2].sizes() == at::IntArrayRef({1, 64, heads, 512}));
    CHECK(meta[5].sizes() == at::IntArrayRef({heads / w}));
    CHECK((*p)->Outputs(cfg, 0)[0].shape == std::vector<int64_t>({1, 64, heads, 512}));
  }
  Case c = Prepare(75, 1024, 64, 5);
  CHECK(c.all[4][5][0].item<float>() == at::linspace(0.0, 0.2, 10, at::kBFloat16)[8].item<float>());
  CHECK(c.all[4][6][0].item<float>() ==
        at::linspace(-0.1, 0.1, 10, at::kBFloat16)[8].item<float>());
  CHECK(c.all[2][4].scalar_type() == at::kBFloat16);
}

// At PKB's K = 256 (V shrunk to 32): the state carried rank to rank and an fp64 recurrence
// pass; restarting from zero state at each rank fails (at W = 2 PKB's 1e-2 accepts it).
TEST_CASE(
    "p075 state carried across ranks passes, and dropping it fails (PKB's 1e-2 accepts it at W = "
    "2)",
    "[p075]") {
  for (int w : {2, 4, 8}) {
    INFO("W = " << w);
    Case c = Prepare(75, 1024, 64, w);
    DeltaInputs d = Prep75(c, at::kFloat);
    CHECK(AllRanksPass75(c, Chunked(d, 64, true, at::kBFloat16)));
    CHECK(AllRanksPass75(c, Chunked(Prep75(c, at::kDouble), 64, true, at::kBFloat16)));
    at::Tensor dropped = Chunked(d, 64, false, at::kBFloat16);
    CHECK_FALSE(AllRanksPass75(c, dropped));
    if (w == 2) CHECK(AllRanksPass75(c, dropped, /*pkb=*/true));
  }
}

// --- 74_fla_kimi_delta_attention_cp_tp ---------------------------------------------------------

// The CP group of `t` (t = 0, 1 with TP; the whole world otherwise), in cp-rank order.
std::vector<int> CpGroup74(int w, int t) {
  std::vector<int> g;
  const bool tp = w >= 4 && w % 2 == 0;
  for (int r = tp ? t : 0; r < w; r += tp ? 2 : 1) g.push_back(r);
  return g;
}

DeltaInputs Prep74(const Case& c, const std::vector<int>& ranks, at::ScalarType ct) {
  at::Tensor q = SeqOf(c, ranks, 0).to(ct), k = SeqOf(c, ranks, 1).to(ct);
  at::Tensor g = SeqOf(c, ranks, 3).to(ct);
  const int64_t heads = q.size(2), key = q.size(3);
  const Inputs& first = c.all[ranks[0]];
  at::Tensor a_scale = first[5].to(ct).exp().view({1, 1, heads, 1});
  at::Tensor decay =
      at::exp(at::sigmoid(a_scale * (g + first[6].to(ct).reshape({heads, key}))) * -5.0);
  DeltaInputs d;
  d.q = HeadsFirst(L2Normalize(q, 1e-12) * std::pow(static_cast<double>(key), -0.5));
  d.k = HeadsFirst(L2Normalize(k, 1e-12));
  d.v = HeadsFirst(SeqOf(c, ranks, 2).to(ct));
  d.decay = HeadsFirst(decay);
  d.beta = SeqOf(c, ranks, 4).to(ct).sigmoid().squeeze(0).t().contiguous();
  return d;
}

// Rank r's rows of a (1, T, H, V) group output.
at::Tensor Rows74(const at::Tensor& o, int cp_rank) { return o.narrow(1, 64 * cp_rank, 64); }

TEST_CASE("p074 groups: TP pairs and strided CP groups for even W >= 4, else CP = WORLD",
          "[p074]") {
  auto p = FindProblem(74);
  REQUIRE(p.ok());
  RunConfig cfg;
  cfg.world = 8;
  auto groups = (*p)->Groups(cfg);
  REQUIRE(groups.size() == 2);
  CHECK(groups[0].name == "tp");
  CHECK(groups[0].partition == std::vector<std::vector<int>>{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  CHECK(groups[1].name == "cp");
  CHECK(groups[1].partition == std::vector<std::vector<int>>{{0, 2, 4, 6}, {1, 3, 5, 7}});
  cfg.world = 6;
  CHECK((*p)->Groups(cfg)[1].partition == std::vector<std::vector<int>>{{0, 2, 4}, {1, 3, 5}});
  for (int w : {1, 2, 3, 5, 7}) {
    cfg.world = w;
    CHECK((*p)->Groups(cfg).empty());
    CHECK(Runnable(74, w));
  }
  cfg.world = 8;
  cfg.device = at::Device(at::kMeta);
  Inputs meta = (*p)->MakeInputs(cfg, 3, 0);
  CHECK(meta[0].sizes() == at::IntArrayRef({1, 64, 16, 128}));
  CHECK(meta[6].sizes() == at::IntArrayRef({2048}));
  CHECK((*p)->Outputs(cfg, 3)[0].shape == std::vector<int64_t>({1, 64, 16, 128}));
}

// At PKB's K = 128 (V shrunk to 8): the state carried along each CP group, an fp64 recurrence,
// and (with TP) the pair summed in fp32 and rounded once pass; dropping the carried state fails
// (PKB's 1e-2 accepts it), and so do contiguous CP groups and a missing TP sum.
TEST_CASE("p074 carried state and a fused TP sum pass, dropped state, wrong groups fail",
          "[p074]") {
  for (int w : {2, 8}) {
    INFO("W = " << w);
    Case c = Prepare(74, 1024, 64, w);
    const bool tp = w >= 4;
    const int cp = tp ? w / 2 : w;
    std::vector<at::Tensor> fp32, fp64, dropped;
    for (int t = 0; t < (tp ? 2 : 1); ++t) {
      DeltaInputs d = Prep74(c, CpGroup74(w, t), at::kFloat);
      fp32.push_back(Chunked(d, 64, true, at::kFloat));
      fp64.push_back(Chunked(Prep74(c, CpGroup74(w, t), at::kDouble), 64, true, at::kFloat));
      dropped.push_back(Chunked(d, 64, false, at::kFloat));
    }
    auto each_rank = [&](auto&& rows) {
      bool ok = true, pkb = true;
      for (int r = 0; r < w; ++r) {
        at::Tensor got = rows(r, tp ? r / 2 : r);
        ok = ok && Passes(c, 0, got, c.truth[r][0]);
        pkb = pkb && PassesPkb(got, c.truth[r][0]);
      }
      return std::make_pair(ok, pkb);
    };
    // PKB's order: each group rounded to bf16, then summed in bf16.
    auto pkb_sum = [&](const std::vector<at::Tensor>& o) {
      return [&, o](int r, int cr) {
        at::Tensor s = o[0].to(at::kBFloat16);
        if (tp) s = s + o[1].to(at::kBFloat16);
        return Rows74(s, cr);
      };
    };
    CHECK(each_rank(pkb_sum(fp32)).first);
    CHECK(each_rank(pkb_sum(fp64)).first);
    if (tp) {
      auto fused = [&](int r, int cr) { return Rows74((fp32[0] + fp32[1]).to(at::kBFloat16), cr); };
      CHECK(each_rank(fused).first);
      auto no_sum = [&](int r, int cr) { return Rows74(fp32[r % 2].to(at::kBFloat16), cr); };
      CHECK_FALSE(each_rank(no_sum).first);
      // Contiguous CP groups {0..cp-1}, {cp..W-1}: the wrong layout.
      std::vector<int> lo, hi;
      for (int r = 0; r < cp; ++r) lo.push_back(r), hi.push_back(cp + r);
      at::Tensor wrong = (Chunked(Prep74(c, lo, at::kFloat), 64, true, at::kFloat) +
                          Chunked(Prep74(c, hi, at::kFloat), 64, true, at::kFloat))
                             .to(at::kBFloat16);
      CHECK_FALSE(each_rank([&](int r, int cr) { return Rows74(wrong, r % cp); }).first);
    }
    auto drop = each_rank(pkb_sum(dropped));
    CHECK_FALSE(drop.first);
    CHECK(drop.second);
  }
}

}  // namespace
}  // namespace pkb::hazards
