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

TEST_CASE("p033 needs W | M while p034 and p035 take any W and p036-p039 need W | 8",
          "[p033][p034][p035][p036][p037][p038][p039]") {
  CHECK(Runnable(33, 64, 64, 8));
  CHECK(Runnable(33, 66, 64, 3));
  CHECK_FALSE(Runnable(33, 66, 64, 4));
  CHECK_FALSE(Runnable(33, 64, 64, 3));
  for (int id : {34, 35}) {
    for (int w : {1, 2, 3, 5, 6, 7, 8, 16}) CHECK(Runnable(id, 64, 64, w));
  }
  for (int id : {36, 37, 38, 39}) {
    INFO("problem " << id);
    for (int w : {1, 2, 4, 8}) CHECK(Runnable(id, 1024, 1024, w));
    for (int w : {3, 5, 6, 7, 16}) CHECK_FALSE(Runnable(id, 1024, 1024, w));
  }
}

TEST_CASE("p033-p039 inputs draw on the meta device, so the spec can list their shapes",
          "[p033][p034][p035][p036][p037][p038][p039]") {
  for (int id = 33; id <= 39; ++id) {
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

TEST_CASE("p033 blocks side by side in source order pass and stacked or own blocks fail",
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

TEST_CASE("p035 declares its output from the config and rank and never from the inputs", "[p035]") {
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

TEST_CASE(
    "p036 consecutive head groups with the sequence in source order pass and strided heads fail",
    "[p036]") {
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

TEST_CASE("p037 pads the sequence when W does not divide T and the padding lands as zeros",
          "[p037]") {
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

TEST_CASE("p038 chunks whole heads of Q and K and V and splitting the flat 3HD axis fails",
          "[p038]") {
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

// --- 39_ulysses_attention_e2e ------------------------------------------------------------------

namespace p39 {

constexpr int64_t kH = 8, kDh = 64, kHd = 512;

// Ways to compute problem 39: correct ones with other rounding points, and standard mistakes.
enum class Way {
  kFp32Softmax,    // softmax in fp32, P unrounded, P V in fp32, ctx rounded to dt
  kFlash,          // online softmax key by key, P rounded to dt for P V, ctx = acc / l
  kFp32Epilogue,   // as kFp32Softmax, but ctx stays fp32 into the output GEMM
  kFp64Gemms,      // every GEMM in fp64, rounded at the reference's points (another order)
  kFp32Scores,     // raw scores kept in fp32 (not rounded to dt)
  kUnscaled,       // softmax without the 0.125 scale
  kOneGroup,       // attention over all 8 heads at W > 1 (no head scatter)
  kStridedGroups,  // rank j's group is heads j, j + W, ...
};

at::Tensor Rounded(const at::Tensor& x, at::ScalarType dt) { return x.to(dt).to(at::kFloat); }

// x y^T in fp64, rounded to dt (a GEMM with another accumulation order), as fp32.
at::Tensor Gemm64(const at::Tensor& x, const at::Tensor& y, at::ScalarType dt) {
  return Rounded(at::matmul(x.to(at::kDouble), y.to(at::kDouble).transpose(-2, -1)), dt);
}

// Rank r's context (B, S, H, Dh) computed `way` from its own inputs (the layer is token-local),
// in fp32 holding dt values unless `way` keeps it in fp32.
at::Tensor Ctx(const Case& c, int r, Way way) {
  const at::ScalarType dt = c.cfg.dtype;
  const Inputs& in = c.all[r];
  const int64_t w = way == Way::kOneGroup ? 1 : c.cfg.world, g = kH / w;
  const int64_t b = in[0].size(0), s = in[0].size(1);
  const bool f64 = way == Way::kFp64Gemms;
  at::Tensor qkv = f64 ? Gemm64(in[0], in[1], dt) : at::linear(in[0], in[1]).to(at::kFloat);
  qkv = qkv.view({b, s, 3, kH, kDh});
  // order[j g + i] = the head at slot i of group j.
  at::Tensor order = at::arange(kH, at::kLong);
  if (way == Way::kStridedGroups) order = order.view({g, w}).t().reshape({-1});
  auto grouped = [&](int64_t which) {
    return qkv.select(2, which).index_select(2, order).view({b, s, w, g, kDh});
  };
  at::Tensor q = grouped(0), k = grouped(1), v = grouped(2);
  at::Tensor raw;
  if (f64) {
    raw = Gemm64(q, k, dt);
  } else if (way == Way::kFp32Scores) {
    raw = at::matmul(q, k.transpose(-2, -1));
  } else {
    raw = at::matmul(q.to(dt), k.to(dt).transpose(-2, -1)).to(at::kFloat);
  }
  at::Tensor scores = raw * (way == Way::kUnscaled ? 1.0 : 0.125);
  at::Tensor ctx;
  if (way == Way::kFlash) {
    at::Tensor m = at::full({b, s, w, g, 1}, -INFINITY), l = at::zeros({b, s, w, g, 1});
    at::Tensor acc = at::zeros({b, s, w, g, kDh});
    for (int64_t j = 0; j < g; ++j) {
      at::Tensor sj = scores.narrow(-1, j, 1), m_new = at::maximum(m, sj);
      at::Tensor corr = at::exp(m - m_new), p = at::exp(sj - m_new);
      l = l * corr + p;
      acc = acc * corr + Rounded(p, dt) * v.narrow(3, j, 1);
      m = m_new;
    }
    ctx = Rounded(acc / l, dt);
  } else if (f64) {
    at::Tensor p = Rounded(at::softmax(scores, -1), dt);
    ctx = Gemm64(p, v.transpose(-2, -1), dt);
  } else {
    ctx = at::matmul(at::softmax(scores, -1), v);
    if (way != Way::kFp32Epilogue) ctx = Rounded(ctx, dt);
  }
  // Back to head order.
  return at::zeros({b, s, kH, kDh}).index_copy(2, order, ctx.reshape({b, s, kH, kDh}));
}

// The output projection of a (B, S, H, Dh) context with rank r's w_o, as `way` does it.
at::Tensor Project(const Case& c, int r, const at::Tensor& ctx, Way way) {
  const at::Tensor& wo = c.all[r][2];
  at::Tensor flat = ctx.reshape({ctx.size(0), ctx.size(1), kHd});
  if (way == Way::kFp64Gemms) return Gemm64(flat, wo, c.cfg.dtype).to(c.cfg.dtype);
  if (way == Way::kFp32Epilogue) return at::linear(flat, wo.to(at::kFloat)).to(c.cfg.dtype);
  return at::linear(flat.to(c.cfg.dtype), wo);
}

at::Tensor Out(const Case& c, int r, Way way) { return Project(c, r, Ctx(c, r, way), way); }

// The mistake of leaving out the return all-to-all: rank r projects its own head group over all
// W S positions, reshaped to (B, S, 512).
at::Tensor NoReturnAllToAll(const Case& c, int r) {
  const int64_t w = c.cfg.world, g = kH / w;
  std::vector<at::Tensor> pieces;
  for (int s = 0; s < w; ++s) pieces.push_back(Ctx(c, s, Way::kFp32Softmax).narrow(2, r * g, g));
  at::Tensor mine = at::cat(pieces, 1);
  return Project(c, r, mine.reshape({mine.size(0), -1, kH, kDh}), Way::kFp32Softmax);
}

// The "real" Ulysses attention: every head attends over the global sequence (heads moved in
// front of the sequence), in dt ops as the reference's calls would run them.
at::Tensor SequenceAttention(const Case& c, int r) {
  const int64_t w = c.cfg.world;
  std::vector<at::Tensor> qs, ks, vs;
  for (int s = 0; s < w; ++s) {
    const Inputs& in = c.all[s];
    at::Tensor qkv = at::linear(in[0], in[1]).view({in[0].size(0), in[0].size(1), 3, kH, kDh});
    qs.push_back(qkv.select(2, 0));
    ks.push_back(qkv.select(2, 1));
    vs.push_back(qkv.select(2, 2));
  }
  at::Tensor q = at::cat(qs, 1).transpose(1, 2), k = at::cat(ks, 1).transpose(1, 2);
  at::Tensor v = at::cat(vs, 1).transpose(1, 2);
  at::Tensor p = at::softmax(at::matmul(q, k.transpose(-2, -1)) * 0.125, -1);
  at::Tensor ctx = at::matmul(p, v).transpose(1, 2);  // (B, W S, H, Dh)
  const int64_t s = c.all[r][0].size(1);
  return Project(c, r, ctx.narrow(1, r * s, s).to(at::kFloat), Way::kFp32Softmax);
}

// The smallest atol that `got` needs under rtol 0.01.
double NeededAtol(const at::Tensor& got, const at::Tensor& want) {
  at::Tensor e = want.to(at::kDouble), a = got.to(at::kDouble);
  return ((a - e).abs() - 0.01 * e.abs()).max().item<double>();
}

}  // namespace p39

// PKB's default shape: B = T = 16, 131072 output elements per W, enough near-ties per trial.
constexpr int64_t kM = 1024, kN = 1024;

TEST_CASE("p039 other rounding points pass at W = 1 to 8 and PKB's 1e-2 rejects them", "[p039]") {
  using p39::Way;
  for (int w : {1, 2, 4, 8}) {
    Case c = Prepare(39, kM, kN, w);
    bool pkb_rejects = false;
    for (int r = 0; r < w; ++r) {
      INFO("W = " << w << ", rank " << r);
      const at::Tensor& want = c.truth[r][0];
      for (Way way : {Way::kFp32Softmax, Way::kFlash, Way::kFp32Epilogue, Way::kFp64Gemms}) {
        INFO("way " << static_cast<int>(way));
        at::Tensor got = p39::Out(c, r, way);
        CHECK(Passes(c, 0, got, want));
        // Measured up to 2.7 over 5 trials at each W: atol = 8 leaves a margin of 3.
        CHECK(p39::NeededAtol(got, want) < 0.5 * c.p->GetTolerance(c.cfg, 0).atol);
      }
      pkb_rejects |= !PassesPkb(p39::Out(c, r, Way::kFp32Softmax), want);
    }
    // At W = 8 every group is one head (P = 1): the fp32 softmax changes nothing.
    if (w < 8) CHECK(pkb_rejects);
  }
}

TEST_CASE("p039 wrong layouts or all-to-alls and sequence attention and no scale all fail",
          "[p039]") {
  using p39::Way;
  for (int w : {1, 2, 4, 8}) {
    Case c = Prepare(39, kM, kN, w);
    for (int r = 0; r < w; ++r) {
      INFO("W = " << w << ", rank " << r);
      const at::Tensor& want = c.truth[r][0];
      CHECK_FALSE(Passes(c, 0, p39::SequenceAttention(c, r), want));
      if (w < 8) {
        // With one head per group (W = 8) the scale and the grouping change nothing.
        CHECK_FALSE(Passes(c, 0, p39::Out(c, r, Way::kUnscaled), want));
      } else {
        CHECK(Same(p39::Out(c, r, Way::kUnscaled), p39::Out(c, r, Way::kFp32Softmax)));
      }
      if (w == 1) continue;  // one group of all heads and no exchange are the W = 1 problem
      CHECK_FALSE(Passes(c, 0, p39::Out(c, r, Way::kOneGroup), want));
      CHECK_FALSE(Passes(c, 0, p39::NoReturnAllToAll(c, r), want));
      if (w < 8) CHECK_FALSE(Passes(c, 0, p39::Out(c, r, Way::kStridedGroups), want));
      // Another rank's tokens (the sequence gathered or scattered in the wrong order).
      CHECK_FALSE(Passes(c, 0, c.truth[(r + 1) % w][0], want));
    }
  }
}

TEST_CASE("p039 fp32 scores fail and no elementwise tolerance could separate them from no scale",
          "[p039]") {
  using p39::Way;
  // Rounding q.k to bf16 moves a scaled score by up to 4, which decides P near a tie: fp32
  // scores fail every trial at W < 8 (measured 300-7000 of 131072 elements).
  for (int w : {1, 2, 4}) {
    Case c = Prepare(39, kM, kN, w);
    bool rejected = false;
    for (int r = 0; r < w; ++r) {
      rejected |= !Passes(c, 0, p39::Out(c, r, Way::kFp32Scores), c.truth[r][0]);
    }
    CHECK(rejected);
  }
  // At W = 2 (set 0) fp32 scores need a larger atol than the unscaled softmax does: any atol
  // that accepted fp32 scores would accept a softmax without its scale.
  Case c = Prepare(39, kM, kN, 2);
  double fp32_scores = 0, unscaled = 0;
  for (int r = 0; r < 2; ++r) {
    fp32_scores =
        std::max(fp32_scores, p39::NeededAtol(p39::Out(c, r, Way::kFp32Scores), c.truth[r][0]));
    unscaled = std::max(unscaled, p39::NeededAtol(p39::Out(c, r, Way::kUnscaled), c.truth[r][0]));
  }
  CHECK(fp32_scores > unscaled);
  // At W = 8 a score never reaches a softmax with another entry: fp32 scores are exact there.
  Case eight = Prepare(39, kM, kN, 8);
  for (int r = 0; r < 8; ++r) {
    CHECK(Passes(eight, 0, p39::Out(eight, r, Way::kFp32Scores), eight.truth[r][0]));
  }
}

}  // namespace
}  // namespace pkb::hazards
