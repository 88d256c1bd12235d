// Hazard tests of the FFT and convolution problems: the distributed rfft2 / irfft2 (59, 60), the
// Hyena convolutions under zigzag context parallelism (71, 72), the Open-Sora conv3d all-reduce
// (76) and the patch-parallel conv2d halo exchange (87) (see hazards.h).
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

TEST_CASE("p059 every rank draws the one field from the shared seed; slabs tile it", "[p059]") {
  Case c = Prepare(59, 128, 96, 4, 1);
  at::manual_seed(c.p->Seed(0, 1));
  at::Tensor field = at::randn({2, 128, 96}, at::kFloat);
  CHECK(Same(Field59(c), field));
  CHECK(c.p->Seed(3, 1) == c.p->Seed(0, 1));
  for (int w : {1, 3, 5, 7, 8}) CHECK(Runnable(59, w));  // H and L round up to a multiple of W
}

TEST_CASE("p059 other transform orders pass; conjugate, bf16 exchange, no scaling fail", "[p059]") {
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

}  // namespace
}  // namespace pkb::hazards
