// Hazard tests of the FFT and convolution problems: the distributed rfft2 / irfft2 (59, 60), the
// Hyena convolutions under zigzag context parallelism (71, 72), the Open-Sora conv3d all-reduce
// (76) and the patch-parallel conv2d halo exchange (87) (see hazards.h).
#include <algorithm>

#include "problems/hazards/hazards.h"

namespace pkb::hazards {
namespace {

bool Runnable(int id, int world, int64_t m = 1024, int64_t n = 1024) {
  auto p = FindProblem(id);
  REQUIRE(p.ok());
  RunConfig cfg;
  cfg.m = m;
  cfg.n = n;
  cfg.world = world;
  return (*p)->CanImplement(cfg).ok();
}

// --- Complex outputs ---------------------------------------------------------------------------

TEST_CASE("complex outputs are compared on both parts: an imaginary-only error fails",
          "[p059][p060]") {
  at::Tensor want = at::randn({64, 33}, at::kComplexFloat);
  at::Tensor imag_off = want + c10::complex<float>(0, 0.5f);
  at::Tensor real_off = want + c10::complex<float>(0.5f, 0);
  CHECK(CompareOutput(want.clone(), want, Tolerance{}).ok());
  CHECK_FALSE(CompareOutput(imag_off, want, Tolerance{}).ok());
  CHECK_FALSE(CompareOutput(real_off, want, Tolerance{}).ok());
  CHECK_FALSE(CompareOutput(want.conj().resolve_conj(), want, Tolerance{}).ok());
}

// --- 59_physicsnemo_distributed_rfft -----------------------------------------------------------

// The global field, rebuilt from the rank slabs.
at::Tensor Field59(const Case& c) {
  std::vector<at::Tensor> slabs;
  for (const auto& in : c.all) slabs.push_back(in[0]);
  return at::cat(slabs, 2);
}

at::Tensor Rows(const at::Tensor& y, const Case& c, int r) {
  const int64_t hw = y.size(1) / c.cfg.world;
  return y.narrow(1, r * hw, hw).contiguous();
}

TEST_CASE("p059 every rank draws the one field from the shared seed, slabs tile it", "[p059]") {
  Case c = Prepare(59, 128, 96, 4, 1);
  at::manual_seed(c.p->Seed(0, 1));
  at::Tensor field = at::randn({2, 128, 96}, at::kFloat);
  CHECK(Same(Field59(c), field));
  CHECK(c.p->Seed(3, 1) == c.p->Seed(0, 1));
  for (int w : {1, 3, 5, 7, 8}) CHECK(Runnable(59, w));  // H and L round up to a multiple of W
}

TEST_CASE("p059 other transform orders pass, conjugate, bf16 exchange, no scaling fail", "[p059]") {
  for (int w : {1, 2, 8}) {
    Case c = Prepare(59, 256, 128, w);
    at::Tensor x = Field59(c);
    const int64_t h = x.size(1), l = x.size(2);
    // rfft along L first, then the fft along H: the other pencil order, in fp32.
    at::Tensor other = at::fft_fft(at::fft_rfft(x, l, 2, "ortho"), h, 1, "ortho");
    // The exchanged intermediate rounded to bf16 (half the traffic, a precision cheat).
    at::Tensor a = at::fft_fft(x, h, 1, "ortho");
    at::Tensor a16 = at::view_as_complex(at::view_as_real(a).to(at::kBFloat16).to(at::kFloat));
    at::Tensor lossy = at::fft_rfft(at::real(a16), l, 2, "ortho") +
                       at::fft_rfft(at::imag(a16), l, 2, "ortho") * c10::complex<float>(0, 1);
    at::Tensor unscaled = at::fft_rfft2(x, std::vector<int64_t>{h, l}, {1, 2}, "backward");
    for (int r = 0; r < w; ++r) {
      INFO("W = " << w << ", rank " << r);
      const at::Tensor& want = c.truth[r][0];
      CHECK(Passes(c, 0, Rows(other, c, r), want));
      at::Tensor conj = Rows(other, c, r).conj().resolve_conj();
      CHECK_FALSE(Passes(c, 0, conj, want));
      CHECK(PassesPkb(at::real(conj), at::real(want)));  // PKB's real-part check let it through
      CHECK_FALSE(Passes(c, 0, Rows(lossy, c, r), want));
      CHECK_FALSE(Passes(c, 0, Rows(unscaled, c, r), want));
      if (w > 1) CHECK_FALSE(Passes(c, 0, Rows(other, c, (r + 1) % w), want));
    }
  }
}

// --- 60_physicsnemo_distributed_irfft ----------------------------------------------------------

TEST_CASE("p060 needs W | 720, the inputs draw on the meta device", "[p060]") {
  for (int w : {1, 2, 3, 4, 5, 6, 8, 16}) CHECK(Runnable(60, w));
  for (int w : {7, 11, 32}) CHECK_FALSE(Runnable(60, w));
  auto p = FindProblem(60);
  REQUIRE(p.ok());
  RunConfig cfg;
  cfg.world = 8;
  cfg.device = at::Device(at::kMeta);
  Inputs meta = (*p)->MakeInputs(cfg, 3, 0);
  CHECK(meta[0].sizes() == at::IntArrayRef({2, 10, 90, 721}));  // PKB's shapes at M = 1024
  CHECK(meta[0].scalar_type() == at::kComplexFloat);
  CHECK((*p)->Outputs(cfg, 3)[0].shape == std::vector<int64_t>({2, 10, 720, 180}));
}

// The half spectrum rebuilt from the rank slabs.
at::Tensor Half60(const Case& c) {
  std::vector<at::Tensor> slabs;
  for (const auto& in : c.all) slabs.push_back(in[0]);
  return at::cat(slabs, 2);
}

at::Tensor Cols(const at::Tensor& y, const Case& c, int r) {
  const int64_t lw = y.size(-1) / c.cfg.world;
  return y.narrow(-1, r * lw, lw).contiguous();
}

TEST_CASE("p060 C2R and the regenerated field pass, bf16, no completion, no row flip fail",
          "[p060]") {
  for (int w : {1, 4, 8}) {
    Case c = Prepare(60, 64, 64, w, 1);
    at::Tensor half = Half60(c);  // (1, 1, 720, 721)
    // The field PKB transformed, redrawn from the shared seed.
    at::manual_seed(c.p->Seed(0, 1));
    at::Tensor field = at::randn({1, 1, 720, 1440}, at::kFloat);
    std::vector<int64_t> s{720, 1440};
    at::Tensor c2r = at::fft_irfft2(half, s, {-2, -1}, "ortho");
    // Columns 721.. zero: the plain complex inverse of the padded half spectrum.
    at::Tensor padded = at::constant_pad_nd(half, {0, 1440 - 721});
    at::Tensor no_completion = at::real(at::fft_ifft2(padded, s, {-2, -1}, "ortho"));
    // conj(column 1440 - k) of the same row, without reversing the rows.
    at::Tensor same_rows = padded.clone();
    same_rows.narrow(-1, 721, 719).copy_(half.narrow(-1, 1, 719).flip({-1}).conj());
    at::Tensor no_flip = at::real(at::fft_ifft2(same_rows, s, {-2, -1}, "ortho"));
    // The width inverse rounded to bf16 before the exchange.
    at::Tensor full = same_rows.clone();
    full.narrow(-1, 721, 719)
        .narrow(-2, 1, 719)
        .copy_(same_rows.narrow(-1, 721, 719).narrow(-2, 1, 719).flip({-2}));
    at::Tensor x1 = at::fft_ifft(full, 1440, -1, "ortho");
    at::Tensor x16 = at::view_as_complex(at::view_as_real(x1).to(at::kBFloat16).to(at::kFloat));
    at::Tensor lossy = at::real(at::fft_ifft(x16, 720, -2, "ortho"));
    at::Tensor exact = at::real(at::fft_ifft(x1, 720, -2, "ortho"));
    for (int r = 0; r < w; ++r) {
      INFO("W = " << w << ", rank " << r);
      const at::Tensor& want = c.truth[r][0];
      CHECK(Passes(c, 0, Cols(exact, c, r), want));
      CHECK(Passes(c, 0, Cols(c2r, c, r), want));
      CHECK(Passes(c, 0, Cols(field, c, r), want));
      CHECK_FALSE(Passes(c, 0, Cols(lossy, c, r), want));
      CHECK_FALSE(Passes(c, 0, Cols(no_completion, c, r), want));
      CHECK_FALSE(Passes(c, 0, Cols(no_flip, c, r), want));
      if (w > 1) CHECK_FALSE(Passes(c, 0, Cols(field, c, (r + 1) % w), want));
    }
  }
}

// --- 71_hyena_conv1d_boundary_exchange ---------------------------------------------------------

enum class Chain { kPkb, kZeroB, kRing, kContiguous, kLastZero };

// Rank r's output with the halos chosen as `chain` says, every chunk convolved in the dtype.
at::Tensor Conv71(const Case& c, int r, Chain chain) {
  const int w = c.cfg.world;
  const int64_t lc = c.all[0][0].size(2) / 2;
  auto chunk_a = [&](int s) { return c.all[s][0].narrow(2, 0, lc); };
  auto chunk_b = [&](int s) { return c.all[s][0].narrow(2, lc, lc); };
  auto tail = [&](const at::Tensor& t) { return t.narrow(2, lc - 6, 6); };
  at::Tensor zero = at::zeros_like(tail(chunk_a(r)));
  at::Tensor prev_a = r > 0 ? tail(chunk_a(r - 1)) : zero;
  at::Tensor next_b = r < w - 1 ? tail(chunk_b(r + 1)) : tail(chunk_a(r));
  switch (chain) {
    case Chain::kPkb:
      break;
    case Chain::kZeroB:  // B treated like the first chunk of a chain
      next_b = zero;
      break;
    case Chain::kRing:  // rank 0's A takes the last rank's A tail
      if (r == 0) prev_a = tail(chunk_a(w - 1));
      break;
    case Chain::kContiguous:  // the local sequence read as one contiguous piece
      next_b = tail(chunk_a(r));
      break;
    case Chain::kLastZero:
      if (r == w - 1) next_b = zero;
      break;
  }
  const at::Tensor& weight = c.all[r][1];
  const int64_t ch = weight.size(0);
  auto conv = [&](const at::Tensor& halo, const at::Tensor& x) {
    return at::conv1d(at::cat({halo, x}, 2), weight, {}, 1, at::IntArrayRef{0}, 1, ch);
  };
  return at::cat({conv(prev_a, chunk_a(r)), conv(next_b, chunk_b(r))}, 2);
}

TEST_CASE("p071 needs W >= 2 and a chunk of at least 6 positions", "[p071]") {
  CHECK_FALSE(Runnable(71, 1));
  for (int w : {2, 3, 4, 8}) CHECK(Runnable(71, w));
  CHECK_FALSE(Runnable(71, 4, 64, 5));
  CHECK(Runnable(71, 4, 64, 6));
}

TEST_CASE("p071 the zigzag chain is the global causal conv, other halo layouts fail", "[p071]") {
  for (int w : {2, 4, 8}) {
    Case c = Prepare(71, 64, 64, w);
    for (int r = 0; r < w; ++r) {
      INFO("W = " << w << ", rank " << r);
      const at::Tensor& want = c.truth[r][0];
      // The oracle convolves the natural-order sequence; PKB's neighbour chain must match it.
      CHECK(Passes(c, 0, Conv71(c, r, Chain::kPkb), want));
      if (r < w - 1) CHECK_FALSE(Passes(c, 0, Conv71(c, r, Chain::kZeroB), want));
      if (r < w - 1) CHECK_FALSE(Passes(c, 0, Conv71(c, r, Chain::kContiguous), want));
      if (r == 0) CHECK_FALSE(Passes(c, 0, Conv71(c, r, Chain::kRing), want));
      if (r == w - 1) CHECK_FALSE(Passes(c, 0, Conv71(c, r, Chain::kLastZero), want));
    }
  }
}

// --- 76_opensora_conv3d_allreduce --------------------------------------------------------------

// Every rank's partial conv3d in the dtype (fp32 accumulation, one rounding), as on the GPU.
std::vector<at::Tensor> Partials76(const Case& c) {
  std::vector<at::Tensor> p;
  for (const auto& in : c.all) p.push_back(at::conv3d(in[0], in[1]));
  return p;
}

// A dtype sum of `x` in `order`, rounded after every addition (NCCL's per-hop SUM).
at::Tensor SumPerHop(const std::vector<at::Tensor>& x, const std::vector<int>& order) {
  at::Tensor s = x[order[0]];
  for (size_t k = 1; k < order.size(); ++k) s = s + x[order[k]];
  return s;
}

at::Tensor SumTree(std::vector<at::Tensor> x) {
  while (x.size() > 1) {
    std::vector<at::Tensor> next;
    for (size_t k = 0; k + 1 < x.size(); k += 2) next.push_back(x[k] + x[k + 1]);
    if (x.size() % 2) next.push_back(x.back());
    x = std::move(next);
  }
  return x[0];
}

TEST_CASE("p076 any reduction order passes at W = 8 while a missing rank fails", "[p076]") {
  // PKB's channel counts (Cout = 512, Cl = 64 at W = 8) on a 1 x 6 x 6 output.
  Case c = Prepare(76, 1024, 96, 8);
  const int w = c.cfg.world;
  std::vector<at::Tensor> parts = Partials76(c);
  at::Tensor bias = c.all[0][2].view({1, -1, 1, 1, 1});
  const at::Tensor& want = c.truth[0][0];
  double worst = 0;
  const double atol = c.p->GetTolerance(c.cfg, 0).atol;
  for (int start = 0; start < w; ++start) {
    std::vector<int> order;
    for (int k = 0; k < w; ++k) order.push_back((start + k) % w);
    at::Tensor got = SumPerHop(parts, order) + bias;
    CHECK(Passes(c, 0, got, want));
    at::Tensor slack =
        (got.to(at::kDouble) - want.to(at::kDouble)).abs() - 0.01 * want.to(at::kDouble).abs();
    worst = std::max(worst, slack.max().item<double>());
    std::reverse(order.begin(), order.end());
    CHECK(Passes(c, 0, SumPerHop(parts, order) + bias, want));
  }
  INFO("worst per-hop slack " << worst << ", atol " << atol);
  CHECK(worst < atol);
  CHECK(Passes(c, 0, SumTree(parts) + bias, want));
  std::vector<at::Tensor> f32;
  for (const auto& p : parts) f32.push_back(p.to(at::kFloat));
  CHECK(Passes(c, 0, (SumTree(f32) + bias.to(at::kFloat)).to(at::kBFloat16), want));
  // One fused fp32 conv over all input channels, rounded once.
  std::vector<at::Tensor> xs, ws;
  for (const auto& in : c.all) {
    xs.push_back(in[0].to(at::kFloat));
    ws.push_back(in[1].to(at::kFloat));
  }
  at::Tensor fused = at::conv3d(at::cat(xs, 1), at::cat(ws, 1)) + bias.to(at::kFloat);
  CHECK(Passes(c, 0, fused.to(at::kBFloat16), want));
  // PKB's 1e-2 rejects the per-hop order it runs itself against an exact sum.
  CHECK_FALSE(PassesPkb(SumPerHop(parts, {0, 1, 2, 3, 4, 5, 6, 7}) + bias, want));
  for (int missing = 0; missing < w; ++missing) {
    INFO("rank " << missing << " missing");
    std::vector<at::Tensor> rest;
    for (int r = 0; r < w; ++r) {
      if (r != missing) rest.push_back(parts[r]);
    }
    CHECK_FALSE(Passes(c, 0, SumTree(rest) + bias, want));
  }
}

// --- 87_conv2d_boundary_exchange ---------------------------------------------------------------

enum class Halo { kChain, kZero, kRing, kSwapped, kTwoImages };

// Rank r's output with its halos taken as `halo` says, in the dtype (PKB's conv2d).
at::Tensor Conv87(const Case& c, int r, Halo halo) {
  const int w = c.cfg.world;
  const at::Tensor& x = c.all[r][0];
  const int64_t hl = x.size(2);
  auto first = [&](int s) { return c.all[s][0].narrow(2, 0, 1); };
  auto last = [&](int s) { return c.all[s][0].narrow(2, hl - 1, 1); };
  at::Tensor zero = at::zeros_like(first(r));
  at::Tensor top = r > 0 ? last(r - 1) : zero, bottom = r < w - 1 ? first(r + 1) : zero;
  switch (halo) {
    case Halo::kChain:
      break;
    case Halo::kZero:
      top = bottom = zero;
      break;
    case Halo::kRing:
      top = last((r + w - 1) % w);
      bottom = first((r + 1) % w);
      break;
    case Halo::kSwapped:
      std::swap(top, bottom);
      break;
    case Halo::kTwoImages:  // W/2 ranks per image, as PKB's Hl suggests
      if (r == w / 2) top = zero;
      if (r == w / 2 - 1) bottom = zero;
      break;
  }
  at::Tensor padded = at::cat({top, x, bottom}, 2);
  return at::conv2d(padded, c.all[r][1], c.all[r][2], 1, at::IntArrayRef({0, 1}));
}

TEST_CASE("p087 the halo chain: zero, ring, swapped or per-image halos fail", "[p087]") {
  for (int w : {2, 4, 8}) {
    Case c = Prepare(87, 256, 64, w);
    for (int r = 0; r < w; ++r) {
      INFO("W = " << w << ", rank " << r);
      const at::Tensor& want = c.truth[r][0];
      CHECK(Passes(c, 0, Conv87(c, r, Halo::kChain), want));
      CHECK_FALSE(Passes(c, 0, Conv87(c, r, Halo::kSwapped), want));
      if (w > 1) CHECK_FALSE(Passes(c, 0, Conv87(c, r, Halo::kZero), want));
      if (r == 0 || r == w - 1) CHECK_FALSE(Passes(c, 0, Conv87(c, r, Halo::kRing), want));
      if (w >= 4 && (r == w / 2 || r == w / 2 - 1)) {
        CHECK_FALSE(Passes(c, 0, Conv87(c, r, Halo::kTwoImages), want));
      }
      // Another rank's weights.
      Case other = c;
      other.all[r].tensors[1] = c.all[(r + 1) % w][1];
      CHECK_FALSE(Passes(c, 0, Conv87(other, r, Halo::kChain), want));
    }
  }
}

TEST_CASE("p087 PKB's sizes at M >= 1024, M below shrinks C and the latent side", "[p087]") {
  auto p = FindProblem(87);
  REQUIRE(p.ok());
  RunConfig cfg;
  cfg.world = 8;
  cfg.device = at::Device(at::kMeta);
  Inputs in = (*p)->MakeInputs(cfg, 0, 0);
  CHECK(in[0].sizes() == at::IntArrayRef({1, 1280, 32, 128}));
  CHECK(in[1].sizes() == at::IntArrayRef({1280, 1280, 3, 3}));
  cfg.m = 4096;
  cfg.n = 256;
  cfg.world = 1;
  CHECK((*p)->MakeInputs(cfg, 0, 0)[0].sizes() == at::IntArrayRef({1, 320, 128, 128}));
  cfg.m = 64;
  cfg.world = 8;
  CHECK((*p)->MakeInputs(cfg, 0, 0)[0].sizes() == at::IntArrayRef({1, 20, 3, 8}));
}

}  // namespace
}  // namespace pkb::hazards
