// Hazard tests of the context-parallel long-sequence operators: the Hyena long FFT convolution
// (72), whose outputs depend on every earlier position of the sequence held by other ranks (see
// hazards.h).
#include <algorithm>
#include <cmath>

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

TEST_CASE("p072 needs W | C and no float16; PKB's shapes on the meta device", "[p072]") {
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

TEST_CASE("p072 PKB's filter is bf16(arange)/F on every rank; sets >= 1 share a random one",
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

}  // namespace
}  // namespace pkb::hazards
