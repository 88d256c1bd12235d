// Hazard tests of the Ulysses sequence-parallel problems 33-39 (see hazards.h).
#include "problems/hazards/hazards.h"

namespace pkb::hazards {
namespace {

bool Runnable(int id, int64_t m, int64_t n, int world) {
  RunConfig cfg;
  cfg.m = m;
  cfg.n = n;
  cfg.world = world;
  return CheckRunnable(**FindProblem(id), cfg).ok();
}

// --- World-size rules --------------------------------------------------------------------------

TEST_CASE("p033 needs W | M; p034 and p035 take any W; p036-p038 need W | 8",
          "[p033][p034][p035][p036][p037][p038]") {
  CHECK(Runnable(33, 64, 64, 8));
  CHECK(Runnable(33, 66, 64, 3));
  CHECK_FALSE(Runnable(33, 66, 64, 4));
  CHECK_FALSE(Runnable(33, 64, 64, 3));
  for (int id : {34, 35}) {
    for (int w : {1, 2, 3, 5, 6, 7, 8, 16}) CHECK(Runnable(id, 64, 64, w));
  }
  for (int id : {36, 37, 38}) {
    INFO("problem " << id);
    for (int w : {1, 2, 4, 8}) CHECK(Runnable(id, 1024, 1024, w));
    for (int w : {3, 5, 6, 7, 16}) CHECK_FALSE(Runnable(id, 1024, 1024, w));
  }
}

TEST_CASE("p033-p038 inputs draw on the meta device, so the spec can list their shapes",
          "[p033][p034][p035][p036][p037][p038]") {
  for (int id = 33; id <= 38; ++id) {
    INFO("problem " << id);
    auto p = FindProblem(id);
    REQUIRE(p.ok());
    RunConfig cfg;
    cfg.m = 128;
    cfg.n = 256;
    cfg.world = 2;
    Inputs cpu = (*p)->MakeInputs(cfg, 1, 0);
    cfg.device = at::Device(at::kMeta);
    Inputs meta;
    REQUIRE_NOTHROW(meta = (*p)->MakeInputs(cfg, 1, 0));
    REQUIRE(meta.tensors.size() == cpu.tensors.size());
    for (size_t i = 0; i < cpu.tensors.size(); ++i) {
      CHECK(meta[i].sizes() == cpu[i].sizes());
      CHECK(meta[i].scalar_type() == cpu[i].scalar_type());
    }
    CHECK(meta.scalars.size() == cpu.scalars.size());
  }
}

// --- Exact data movement -----------------------------------------------------------------------

TEST_CASE("p033-p038 compare bit for bit: one ulp off or a bf16 round trip of fp32 fails",
          "[p033][p034][p035][p036][p037][p038]") {
  for (int id = 33; id <= 38; ++id) {
    INFO("problem " << id);
    Case c = Prepare(id, 128, 256, 2);
    CHECK(c.p->GetTolerance(c.cfg, 0).exact);
    const at::Tensor& want = c.truth[1][0];
    CHECK(Passes(c, 0, want.clone(), want));
    // The smallest change of one element: its bits plus one.
    at::Tensor off = want.clone();
    off.view(at::kShort).reshape({-1})[7] += 1;
    CHECK_FALSE(Passes(c, 0, off, want));
    // Run in float32: a copy through bfloat16 loses bits.
    RunConfig f32 = c.cfg;
    f32.dtype = at::kFloat;
    std::vector<Inputs> all = DrawAllInputs(*c.p, f32, 0);
    auto truth = c.p->Oracle(all, f32);
    REQUIRE(truth.ok());
    const at::Tensor& w32 = (*truth)[1][0];
    CHECK_FALSE(
        CompareOutput(w32.to(at::kBFloat16).to(at::kFloat), w32, c.p->GetTolerance(f32, 0)).ok());
  }
}

TEST_CASE("p033 blocks side by side in source order; stacking them or the own block fails",
          "[p033]") {
  Case c = Prepare(33, 64, 32, 4);
  const int64_t rows = 16;
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    const at::Tensor& want = c.truth[r][0];
    std::vector<at::Tensor> fwd, rev, own;
    for (int s = 0; s < 4; ++s) {
      fwd.push_back(c.all[s][0].narrow(0, r * rows, rows));
      rev.push_back(c.all[3 - s][0].narrow(0, r * rows, rows));
      own.push_back(c.all[s][0].narrow(0, s * rows, rows));  // block s sent instead of block r
    }
    CHECK(Same(at::cat(fwd, 1), want));
    CHECK_FALSE(Passes(c, 0, at::cat(rev, 1), want));
    CHECK_FALSE(Passes(c, 0, at::cat(own, 1), want));
    CHECK_FALSE(Passes(c, 0, at::cat(fwd, 0), want));  // gathered along rows: (M, N)
    // Scattering columns instead of rows gives the right shape only if M = N; here it does not.
    CHECK_FALSE(Passes(c, 0, c.all[r][0], want));
  }
  Case one = Prepare(33, 64, 32, 1);
  CHECK(Same(one.truth[0][0], one.all[0][0]));
}

TEST_CASE("p034 and p035 every rank returns all blocks in rank order", "[p034][p035]") {
  for (int id : {34, 35}) {
    for (int w : {3, 8}) {
      INFO("problem " << id << ", W = " << w);
      Case c = Prepare(id, 16, 32, w);
      std::vector<at::Tensor> fwd, rev;
      for (int s = 0; s < w; ++s) {
        fwd.push_back(c.all[s][0]);
        rev.push_back(c.all[w - 1 - s][0]);
      }
      for (int r = 0; r < w; ++r) {
        const at::Tensor& want = c.truth[r][0];
        CHECK(Same(at::cat(fwd, 0), want));
        CHECK_FALSE(Passes(c, 0, at::cat(rev, 0), want));
        CHECK_FALSE(Passes(c, 0, at::stack(fwd, 0), want));  // (W, M, N): another shape
        CHECK_FALSE(Passes(c, 0, c.all[r][0], want));        // only the own block
      }
    }
  }
}

TEST_CASE("p035 declares its output from the config and rank, never from the inputs", "[p035]") {
  auto p = FindProblem(35);
  REQUIRE(p.ok());
  for (int w : {1, 2, 3, 8}) {
    Case c = Prepare(35, 24, 40, w);
    for (int r = 0; r < w; ++r) {
      INFO("W = " << w << ", rank " << r);
      std::vector<OutputDecl> decl = (*p)->Outputs(c.cfg, r);
      REQUIRE(decl.size() == 1);
      CHECK(decl[0].shape == std::vector<int64_t>{24 * w, 40});
      CHECK(decl[0].dtype == c.cfg.dtype);
      CHECK(c.truth[r][0].sizes().vec() == decl[0].shape);
      // Gathered along columns (the other gather_dim): same numel, another shape.
      if (w > 1) {
        std::vector<at::Tensor> xs;
        for (int s = 0; s < w; ++s) xs.push_back(c.all[s][0]);
        CHECK_FALSE(Passes(c, 0, at::cat(xs, 1), c.truth[r][0]));
      }
    }
  }
  // The statement says what every rank returns and that host syncs are legal and timed.
  const std::string& text = (*p)->info().statement;
  CHECK(text.find("identical on all ranks") != std::string::npos);
  CHECK(text.find("Host synchronizations") != std::string::npos);
  CHECK(text.find("(W M, N)") != std::string::npos);
}

// Heads [r H/W, (r+1) H/W) of every rank, the sequence gathered in source order (p036), or the
// mistake of taking heads r, r + W, ... (a strided split).
at::Tensor Scatter36(const Case& c, int r, bool strided) {
  const int64_t w = c.cfg.world, g = 8 / w;
  std::vector<at::Tensor> pieces;
  for (int s = 0; s < w; ++s) {
    const at::Tensor& x = c.all[s][0];
    pieces.push_back(strided ? x.index_select(2, at::arange(r, 8, w)) : x.narrow(2, r * g, g));
  }
  return at::cat(pieces, 1);
}

TEST_CASE("p036 consecutive head groups, sequence in source order; strided heads fail", "[p036]") {
  for (int w : {2, 4}) {
    Case c = Prepare(36, 128, 256, w);
    for (int r = 0; r < w; ++r) {
      INFO("W = " << w << ", rank " << r);
      const at::Tensor& want = c.truth[r][0];
      CHECK(Same(Scatter36(c, r, false), want));
      CHECK_FALSE(Passes(c, 0, Scatter36(c, r, true), want));
      // Gathering along heads instead of the sequence: another shape.
      CHECK_FALSE(Passes(c, 0, Scatter36(c, r, false).transpose(1, 2).contiguous(), want));
    }
  }
}

TEST_CASE("p037 pads the sequence when W does not divide T; the padding lands as zeros", "[p037]") {
  // T = 6 at N = 384: W = 4 pads to 8 positions, 2 per rank.
  Case c = Prepare(37, 128, 384, 4);
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    const at::Tensor& want = c.truth[r][0];
    REQUIRE(want.sizes() == at::IntArrayRef({2, 2, 32, 64}));
    std::vector<at::Tensor> pieces;
    for (int s = 0; s < 4; ++s) {
      at::Tensor x = at::cat({c.all[s][0], at::zeros({2, 2, 8, 64}, c.all[s][0].options())}, 1);
      pieces.push_back(x.narrow(1, r * 2, 2));
    }
    CHECK(Same(at::cat(pieces, 2), want));
  }
  // Rank 3 holds positions 6 and 7: padding only.
  CHECK(c.truth[3][0].eq(0).all().item<bool>());
  // Splitting the unpadded sequence unevenly (tensor_split: 2, 2, 1, 1) is another answer.
  Case d = Prepare(37, 128, 512, 4);  // T = 8: no padding
  for (int r = 0; r < 4; ++r) {
    std::vector<at::Tensor> fwd, rev;
    for (int s = 0; s < 4; ++s) {
      fwd.push_back(d.all[s][0].narrow(1, r * 2, 2));
      rev.push_back(d.all[3 - s][0].narrow(1, r * 2, 2));
    }
    CHECK(Same(at::cat(fwd, 2), d.truth[r][0]));
    CHECK_FALSE(Passes(d, 0, at::cat(rev, 2), d.truth[r][0]));
  }
}

TEST_CASE("p038 chunks whole heads of Q, K and V; splitting the flat 3HD axis fails", "[p038]") {
  for (int w : {2, 4, 8}) {
    Case c = Prepare(38, 128, 256, w);
    const int64_t chunk = 512 / w;
    for (int r = 0; r < w; ++r) {
      INFO("W = " << w << ", rank " << r);
      const at::Tensor& want = c.truth[r][0];
      std::vector<at::Tensor> right, flat;
      for (int s = 0; s < w; ++s) {
        const at::Tensor& x = c.all[s][0];
        right.push_back(at::cat({x.narrow(2, r * chunk, chunk), x.narrow(2, 512 + r * chunk, chunk),
                                 x.narrow(2, 1024 + r * chunk, chunk)},
                                2));
        // Without the (3, HD) view: the r-th of W consecutive chunks of all 1536 features.
        flat.push_back(x.narrow(2, r * 3 * chunk, 3 * chunk));
      }
      CHECK(Same(at::cat(right, 1), want));
      CHECK_FALSE(Passes(c, 0, at::cat(flat, 1), want));
    }
  }
}

}  // namespace
}  // namespace pkb::hazards
