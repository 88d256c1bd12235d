// Hazard tests of 43 (and, as they land, 40-42 and 47): the sharded Adam steps (see hazards.h and
// problems/dp/adam.h), and the outlier budget of the tolerance they use.
#include "problems/dp/adam.h"
#include "problems/hazards/hazards.h"

namespace pkb::hazards {
namespace {

TEST_CASE("outlier budget: a few elements may use the looser bound, no more", "[check]") {
  at::Tensor want = at::zeros({1000}, at::kFloat);
  Tolerance t{1e-3, 0, false, ""};
  t.outlier_fraction = 2e-3;  // ceil(2) elements
  t.outlier_atol = 1e-2;
  at::Tensor got = want.clone();
  got[3] = 5e-3;
  got[700] = -9e-3;
  CHECK(CompareOutput(got, want, t).ok());
  got[900] = 5e-3;  // a third outlier
  CHECK_FALSE(CompareOutput(got, want, t).ok());
  got[900] = 0;
  got[3] = 2e-2;  // outside the looser bound
  CHECK_FALSE(CompareOutput(got, want, t).ok());
  t.outlier_fraction = 0;
  got[3] = 5e-3;
  CHECK_FALSE(CompareOutput(got, want, t).ok());
  got.fill_(NAN);  // NaN never passes
  t.outlier_fraction = 1;
  CHECK_FALSE(CompareOutput(got, want, t).ok());
}

// How a simulated candidate computes the step; the defaults are the reference's.
struct Variant {
  enum Reduce { kExact, kRingForward, kRingBackward, kSum, kLocal } reduce = kExact;
  int missing = -1;         // a rank whose gradient is left out of the mean
  bool update = true;       // false: parameters returned unchanged
  bool fp32 = false;        // Adam in fp32, rounded once
  bool fp64_grads = false;  // forward and backward in fp64 from the dtype inputs
  int step_offset = 0;
  bool bias_correction = true;
};

// One Adam step as the variant computes it, on copies; returns the direction m_hat/(sqrt+eps)
// and updates m and v.
at::Tensor Direction(at::Tensor& m, at::Tensor& v, const at::Tensor& g, dp::AdamHyper h,
                     const Variant& var) {
  h.step += var.step_offset;
  if (!var.fp32 && var.bias_correction) return dp::AdamDirection(m, v, g, h);
  const auto dt = m.scalar_type();
  at::Tensor mf = m.to(at::kFloat) * h.beta1 + g.to(at::kFloat) * (1 - h.beta1);
  at::Tensor vf = v.to(at::kFloat) * h.beta2 + g.to(at::kFloat).pow(2) * (1 - h.beta2);
  double bc1 = 1, bc2 = 1;
  if (var.bias_correction) {
    bc1 = 1 - std::pow(h.beta1, double(h.step));
    bc2 = 1 - std::pow(h.beta2, double(h.step));
  }
  m = mf.to(dt);
  v = vf.to(dt);
  return (mf / bc1) / ((vf / bc2).sqrt() + h.eps);  // fp32: rounded once by the caller
}

// p + (-lr) d as the variant would: fp32 all the way and one rounding, or PKB's product first.
at::Tensor Apply(const at::Tensor& p, const at::Tensor& d, double lr, const Variant& v) {
  if (!v.update) return p.clone();
  if (d.scalar_type() == at::kFloat && p.scalar_type() != at::kFloat) {
    return (p.to(at::kFloat) - lr * d).to(p.scalar_type());
  }
  return p + d.mul(-lr);
}

bool AllPass(const Case& c, const std::vector<std::vector<at::Tensor>>& outs) {
  bool ok = true;
  for (int r = 0; r < c.cfg.world; ++r) {
    for (size_t i = 0; i < outs[r].size(); ++i) {
      Tolerance t = c.p->GetTolerance(c.cfg, static_cast<int>(i));
      v1::OutputCheck k = CompareOutput(outs[r][i], c.truth[r][i], t);
      if (!k.ok()) {
        t.outlier_fraction = 0;
        v1::OutputCheck tight = CompareOutput(outs[r][i], c.truth[r][i], t);
        UNSCOPED_INFO("rank " << r << " output " << i << " fails: " << tight.bad_count() << "/"
                              << tight.numel() << " outside the tight bound, max abs "
                              << tight.max_abs_error() << ", max rel " << tight.max_rel_error());
        ok = false;
      }
    }
  }
  return ok;
}

// Problem 43 as the variant computes it (there is no gradient to reduce).
std::vector<std::vector<at::Tensor>> Unshard(const Case& c, const Variant& v) {
  std::vector<at::Tensor> shards;
  for (const auto& in : c.all) {
    at::Tensor m = in[2].clone(), sq = in[3].clone();
    at::Tensor d = Direction(m, sq, in[0], dp::ReadHyper(in), v);
    shards.push_back(Apply(in[1], d, dp::ReadHyper(in).lr, v));
  }
  return std::vector<std::vector<at::Tensor>>(c.cfg.world, {at::cat(shards)});
}

using Sim = std::vector<std::vector<at::Tensor>> (*)(const Case&, const Variant&);

// The standard hazards of a step problem on input set `set`.
void CheckStep(int id, Sim sim, int64_t m, int64_t n, int w, int set, bool reduces) {
  Case c = Prepare(id, m, n, w, set);
  INFO("problem " << id << ", " << m << " x " << n << ", W = " << w << ", set " << set);
  CHECK(AllPass(c, sim(c, Variant{})));
  Variant fp32;
  fp32.fp32 = true;
  CHECK(AllPass(c, sim(c, fp32)));
  Variant no_update;
  no_update.update = false;
  CHECK_FALSE(AllPass(c, sim(c, no_update)));
  for (int offset : {-1, 1}) {
    Variant step;
    step.step_offset = offset;
    if (dp::PkbStep(set) + offset >= 1) CHECK_FALSE(AllPass(c, sim(c, step)));
  }
  Variant no_bias;
  no_bias.bias_correction = false;
  CHECK_FALSE(AllPass(c, sim(c, no_bias)));
  if (!reduces) return;
  for (auto order : {Variant::kRingForward, Variant::kRingBackward}) {
    Variant ring;
    ring.reduce = order;
    CHECK(AllPass(c, sim(c, ring)));
    ring.fp32 = true;
    CHECK(AllPass(c, sim(c, ring)));
  }
  Variant fp64;
  fp64.fp64_grads = true;
  CHECK(AllPass(c, sim(c, fp64)));
  if (w == 1) return;
  Variant sum, local;
  sum.reduce = Variant::kSum;
  local.reduce = Variant::kLocal;
  CHECK_FALSE(AllPass(c, sim(c, sum)));
  CHECK_FALSE(AllPass(c, sim(c, local)));
  for (int missing = 0; missing < w; ++missing) {
    Variant miss;
    miss.missing = missing;
    CHECK_FALSE(AllPass(c, sim(c, miss)));
  }
}

TEST_CASE("p043 fp32 Adam passes, no update and a wrong step fail", "[p043]") {
  for (int set : {0, 1, 2}) {
    for (int w : {1, 4}) CheckStep(43, Unshard, 64, 64, w, set, false);
  }
  Case c = Prepare(43, 64, 64, 4, 0);
  CHECK(PassesPkb(at::cat({c.all[0][1], c.all[1][1], c.all[2][1], c.all[3][1]}), c.truth[0][0]));
}

TEST_CASE("p043 the stronger sets' moments are slices of one history", "[seeds]") {
  {
    Case c = Prepare(43, 64, 64, 4, 1);
    std::vector<at::Tensor> m, v;
    for (const auto& in : c.all) {
      m.push_back(in[2]);
      v.push_back(in[3]);
    }
    // v = 0.001 h^2 and m = 0.1 h of the same h: v / m^2 ~ 0.1 wherever h != 0 (an element
    // with h = 0 has m = v = 0, and 0 / 0 would make the maximum NaN), and the slices differ
    // from rank to rank (not one stream position drawn W times).
    const at::Tensor m_all = at::cat(m).to(at::kDouble), v_all = at::cat(v).to(at::kDouble);
    const at::Tensor nonzero = m_all.ne(0);
    INFO(nonzero.logical_not().sum().item<int64_t>() << " of " << m_all.numel() << " moments zero");
    CHECK(v_all.masked_select(nonzero.logical_not()).eq(0).all().item<bool>());
    CHECK(nonzero.sum().item<int64_t>() > m_all.numel() * 9 / 10);
    const at::Tensor ratio = v_all.masked_select(nonzero) / m_all.masked_select(nonzero).pow(2);
    CHECK(ratio.sub(0.1).abs().max().item<double>() < 0.02);
    CHECK_FALSE(Same(m[1], m[2]));
  }
}

}  // namespace
}  // namespace pkb::hazards
