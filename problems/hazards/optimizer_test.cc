// Hazard tests of 40-43 and 47: the DDP, ZeRO and FSDP Adam steps (see hazards.h and
// problems/dp/adam.h), and the outlier budget of the tolerance they use.
#include <algorithm>

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
        {
          const double u = UnitRoundoff(c.cfg.dtype);
          at::Tensor e = c.truth[r][i].to(at::kDouble), a = outs[r][i].to(at::kDouble);
          at::Tensor d = (a - e).abs();
          const double mean = e.abs().mean().item<double>();
          for (int k : {4, 12, 24, 48}) {
            UNSCOPED_INFO("  rtol " << k << "u: needs atol_mean_abs "
                                    << ((d - k * u * e.abs()).clamp_min(0).max().item<double>() /
                                        (u * mean))
                                    << " u (mean |e| " << mean << ")");
          }
        }
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

// The averaged flat gradient each rank would use, reduced as the variant does. Ring orders follow
// NCCL's ring all-reduce and reduce-scatter: chunk k of W is summed starting at rank k + 1 and
// going around (forward) or the other way (backward), rounded to the dtype at every hop.
std::vector<at::Tensor> Reduced(const std::vector<at::Tensor>& local, const Variant& v) {
  const int w = static_cast<int>(local.size());
  const auto dt = local[0].scalar_type();
  std::vector<at::Tensor> grads = local;
  if (v.missing >= 0) grads[v.missing] = at::zeros_like(grads[v.missing]);
  at::Tensor mean;
  switch (v.reduce) {
    case Variant::kLocal:
      return local;
    case Variant::kSum: {
      at::Tensor sum = at::zeros_like(grads[0], at::kDouble);
      for (const auto& g : grads) sum += g.to(at::kDouble);
      mean = sum.to(dt);
      break;
    }
    case Variant::kExact:
      mean = dp::MeanOfRanks(grads);
      break;
    case Variant::kRingForward:
    case Variant::kRingBackward: {
      const int64_t n = grads[0].numel(), chunk = (n + w - 1) / w;
      mean = at::empty_like(grads[0]);
      for (int k = 0; k < w && k * chunk < n; ++k) {
        const int64_t len = std::min(chunk, n - k * chunk);
        const int dir = v.reduce == Variant::kRingForward ? 1 : w - 1;
        int r = (k + 1) % w;
        at::Tensor acc = grads[r].narrow(0, k * chunk, len).clone();
        for (int hop = 1; hop < w; ++hop) {
          r = (r + dir) % w;
          acc = acc + grads[r].narrow(0, k * chunk, len);  // rounded to the dtype
        }
        mean.narrow(0, k * chunk, len).copy_(acc);
      }
      mean = mean.div(static_cast<int64_t>(w));
      break;
    }
  }
  return std::vector<at::Tensor>(w, mean);
}

// Every rank's flat local gradient at the given parameters, in the dtype or (fp64_grads) in fp64
// from the dtype inputs and rounded once.
std::vector<at::Tensor> LocalGrads(const Case& c, const std::vector<at::Tensor>& params,
                                   const Variant& v) {
  std::vector<at::Tensor> out;
  for (const auto& in : c.all) {
    if (!v.fp64_grads) {
      out.push_back(dp::LocalGrad(in[0], in[1], params));
      continue;
    }
    std::vector<at::Tensor> p64;
    for (const auto& p : params) p64.push_back(p.to(at::kDouble));
    out.push_back(dp::LocalGrad(in[0].to(at::kDouble), in[1].to(at::kDouble), p64)
                      .to(in[0].scalar_type()));
  }
  return out;
}

// Problem 40 as the variant computes it: rank 0's state, every rank the whole step.
std::vector<std::vector<at::Tensor>> DdpSim(const Case& c, const Variant& v) {
  const auto& root = c.all[0];
  const std::vector<at::Tensor> params = {root[2], root[3], root[4], root[5]};
  const auto grads = Reduced(LocalGrads(c, params, v), v);
  const auto shapes = dp::DdpShape(c.cfg).ParamShapes();
  std::vector<std::vector<at::Tensor>> out;
  for (int r = 0; r < c.cfg.world; ++r) {
    at::Tensor m = dp::Flatten({root[6], root[7], root[8], root[9]});
    at::Tensor sq = dp::Flatten({root[10], root[11], root[12], root[13]});
    const dp::AdamHyper h = dp::ReadHyper(root);
    at::Tensor d = Direction(m, sq, grads[r], h, v);
    at::Tensor p = Apply(dp::Flatten(params), d, h.lr, v);
    out.emplace_back();
    for (const at::Tensor& flat : {p, m, sq}) {
      for (auto& t : dp::Unflatten(flat, shapes)) out.back().push_back(t);
    }
  }
  return out;
}

// Problems 41 and 42: rank q steps slice q with its own moments; every rank gathers the slices.
std::vector<std::vector<at::Tensor>> ZeroSim(const Case& c, const Variant& v) {
  const auto& root = c.all[0];
  const std::vector<at::Tensor> params = {root[2], root[3], root[4], root[5]};
  const auto grads = Reduced(LocalGrads(c, params, v), v);
  const dp::MlpShape s = *dp::ShardedShape(c.cfg);
  const int64_t part = s.numel() / c.cfg.world;
  const at::Tensor flat = dp::Flatten(params);
  std::vector<at::Tensor> slices, ms, vs;
  for (int q = 0; q < c.cfg.world; ++q) {
    at::Tensor m = c.all[q][6].clone(), sq = c.all[q][7].clone();
    const dp::AdamHyper h = dp::ReadHyper(c.all[q]);
    at::Tensor d = Direction(m, sq, grads[q].narrow(0, q * part, part), h, v);
    slices.push_back(Apply(flat.narrow(0, q * part, part), d, h.lr, v));
    ms.push_back(m);
    vs.push_back(sq);
  }
  const auto gathered = dp::Unflatten(at::cat(slices), s.ParamShapes());
  std::vector<std::vector<at::Tensor>> out;
  for (int r = 0; r < c.cfg.world; ++r) {
    out.push_back(gathered);
    out.back().push_back(ms[r]);
    out.back().push_back(vs[r]);
  }
  return out;
}

// Problem 47: the gathered shards' gradient, each rank's AdamW on its shard.
std::vector<std::vector<at::Tensor>> FsdpSim(const Case& c, const Variant& v) {
  const dp::MlpShape s = *dp::ShardedShape(c.cfg);
  std::vector<at::Tensor> shards;
  for (const auto& in : c.all) shards.push_back(in[2]);
  const auto grads = Reduced(LocalGrads(c, dp::Unflatten(at::cat(shards), s.ParamShapes()), v), v);
  const int64_t part = s.numel() / c.cfg.world;
  std::vector<std::vector<at::Tensor>> out;
  for (int r = 0; r < c.cfg.world; ++r) {
    const auto& in = c.all[r];
    at::Tensor m = in[3].clone(), sq = in[4].clone();
    const dp::AdamHyper h = dp::ReadHyper(in);
    const double wd = dp::Scalar(in, "weight_decay");
    at::Tensor d = Direction(m, sq, grads[r].narrow(0, r * part, part), h, v);
    at::Tensor theta;
    if (!v.update) {
      theta = in[2].clone();
    } else if (d.scalar_type() == at::kFloat && in[2].scalar_type() != at::kFloat) {
      const at::Tensor t0 = in[2].to(at::kFloat);
      theta = (t0 - h.lr * d - h.lr * wd * t0).to(in[2].scalar_type());
    } else {
      theta = in[2].add(d, -h.lr).add_(in[2], -h.lr * wd);
    }
    out.push_back({theta, m, sq});
  }
  return out;
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

namespace pkb::hazards {
namespace {

// The MLP steps at the CPU checks' shape (d_in 256, hid 128, d_out 64) and at 64 x 64, on PKB's
// set 0 (zero moments: the step is lr * sign(g)) and a stronger set (history moments).
TEST_CASE("p040 DDP: ring orders and fp32 Adam pass, a missing rank or a sum fails", "[p040]") {
  for (int set : {0, 1}) {
    for (int w : {1, 2, 8}) CheckStep(40, DdpSim, 64, 256, w, set, true);
  }
  CheckStep(40, DdpSim, 64, 64, 4, 0, true);
}

TEST_CASE("p041 ZeRO-1: ring orders and fp32 Adam pass, a missing rank or a sum fails", "[p041]") {
  for (int set : {0, 1}) {
    for (int w : {1, 2, 8}) CheckStep(41, ZeroSim, 64, 256, w, set, true);
  }
  CheckStep(41, ZeroSim, 64, 64, 4, 0, true);
}

TEST_CASE("p042 ZeRO-2: ring orders and fp32 Adam pass, a missing rank or a sum fails", "[p042]") {
  for (int set : {0, 2}) {
    for (int w : {1, 4, 8}) CheckStep(42, ZeroSim, 64, 256, w, set, true);
  }
}

TEST_CASE("p047 FSDP: ring orders and fp32 AdamW pass, a missing rank or a sum fails", "[p047]") {
  // Set 0 at W > 1 moves few elements (only rank 0's shard is a model); sets > 0 the whole step.
  for (int set : {1, 2}) {
    for (int w : {1, 2, 8}) CheckStep(47, FsdpSim, 64, 256, w, set, true);
  }
  // Set 0 at W = 8: most of a shard's gradient is zero, the rest cancels across ranks.
  for (int w : {4, 8}) CheckStep(47, FsdpSim, 64, 256, w, 0, true);
}

// The moments alone must reject a missing rank, since the parameters cannot show it (see
// RankMissingDetectable).
TEST_CASE("p040-p047 the moments alone reject a missing rank", "[p040][p041][p047]") {
  struct Item {
    int id;
    Sim sim;
    int set;
    std::vector<int> moments;
  };
  for (const Item& it : {Item{40, DdpSim, 0, {4, 5, 6, 7, 8, 9, 10, 11}},
                         Item{41, ZeroSim, 0, {4, 5}}, Item{47, FsdpSim, 1, {1, 2}}}) {
    Case c = Prepare(it.id, 64, 256, 4, it.set);
    for (int missing = 0; missing < 4; ++missing) {
      Variant miss;
      miss.missing = missing;
      const auto outs = it.sim(c, miss);
      for (int index : it.moments) {
        bool rejected = false, differs = false;
        for (int r = 0; r < 4; ++r) {
          if (Same(outs[r][index], c.truth[r][index])) continue;
          differs = true;
          rejected = rejected || !Passes(c, index, outs[r][index], c.truth[r][index]);
        }
        INFO("problem " << it.id << " output " << index << " rank " << missing << " missing");
        CHECK((!differs || rejected));
      }
    }
  }
}

}  // namespace
}  // namespace pkb::hazards
