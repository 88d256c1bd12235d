#include "problems/harness/shapes.h"

#include <algorithm>
#include <optional>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "problems/harness/inputs.h"

namespace pkb {
namespace {

// What a candidate sees of a shape: rank 0's inputs (shapes, dtypes, scalars) and every rank's
// output declarations, drawn on the meta device (nothing is allocated).
std::string Signature(const Problem& p, RunConfig cfg) {
  cfg.device = at::Device(at::kMeta);
  std::string sig;
  try {
    Inputs in = p.MakeInputs(cfg, 0, 0);
    for (const at::Tensor& t : in.tensors)
      absl::StrAppend(&sig, "i", c10::str(t.sizes()), at::toString(t.scalar_type()), ";");
    for (const ScalarArg& s : in.scalars) absl::StrAppend(&sig, "s", s.i, "/", s.f, ";");
  } catch (const std::exception&) {
    absl::StrAppend(&sig, "no meta inputs;");  // the outputs below still tell shapes apart
  }
  for (int rank = 0; rank < cfg.world; ++rank) {
    for (const OutputDecl& o : p.Outputs(cfg, rank)) {
      absl::StrAppend(&sig, "o", rank, ":");
      for (int64_t s : o.shape) absl::StrAppend(&sig, s, ",");
      absl::StrAppend(&sig, at::toString(o.dtype), ";");
    }
  }
  return sig;
}

struct Span {
  int64_t min, max, step;
};

// One dimension's span with the other at its default: the smallest power-of-two step, from
// kRankedShapeAlignment (or the largest power of two below it that divides the default), on which
// every value from `lo` to `hi` runs, if any. `set` writes the value into a config.
template <typename Set>
std::optional<Span> StepOver(const Problem& p, const RunConfig& base, int64_t def, int64_t lo,
                             int64_t hi, Set set) {
  int64_t first_step = kRankedShapeAlignment;
  while (first_step > 1 && def % first_step != 0) first_step /= 2;
  for (int64_t step = first_step; step <= def; step *= 2) {
    if (def % step != 0) break;  // the default must be one of the values
    const int64_t first = (lo + step - 1) / step * step, last = hi / step * step;
    if (first == last) break;  // coarser steps leave only the default
    bool all = true;
    for (int64_t v = first; v <= last && all; v += step) {
      RunConfig cfg = base;
      set(cfg, v);
      all = CheckRunnable(p, cfg).ok();
    }
    if (all) return Span{first, last, step};
  }
  return std::nullopt;
}

// default/2 .. 2 x default; where no step runs all of it (a problem with an upper or lower bound
// near the default), the half above the default, then the half below.
template <typename Set>
Span DeriveDimension(const Problem& p, const RunConfig& base, int64_t def, int64_t limit, Set set) {
  const Span fixed{def, def, 1};
  const int64_t lo = std::max<int64_t>(1, def / 2), hi = std::min(2 * def, limit);
  for (const auto& [from, to] :
       {std::make_pair(lo, hi), std::make_pair(def, hi), std::make_pair(lo, def)}) {
    if (to <= from) continue;
    std::optional<Span> span = StepOver(p, base, def, from, to, set);
    if (!span) continue;
    RunConfig other = base;
    set(other, span->max == def ? span->min : span->max);
    if (Signature(p, other) == Signature(p, base)) return fixed;  // ignored by the problem
    return *span;
  }
  return fixed;
}

bool RangeRunnable(const Problem& p, const RunConfig& base, const ShapeRange& r) {
  // Corners, a grid of up to 9 x 9 points (both ends included), and 64 random points: joint rules
  // (M * N a multiple of a block) pass one dimension at a time but not every pair.
  auto pick = [](int64_t min, int64_t max, int64_t step) {
    std::vector<int64_t> all = ShapeValues(min, max, step), out;
    const size_t k = std::min<size_t>(9, all.size());
    for (size_t i = 0; i < k; ++i) out.push_back(all[k == 1 ? 0 : i * (all.size() - 1) / (k - 1)]);
    return out;
  };
  std::vector<std::pair<int64_t, int64_t>> points;
  for (int64_t m : pick(r.m_min, r.m_max, r.m_step)) {
    for (int64_t n : pick(r.n_min, r.n_max, r.n_step)) points.emplace_back(m, n);
  }
  std::mt19937_64 rng(static_cast<uint64_t>(p.info().id) * 16 + base.world);
  const int64_t cm = (r.m_max - r.m_min) / r.m_step + 1, cn = (r.n_max - r.n_min) / r.n_step + 1;
  for (int i = 0; i < 64; ++i) {
    points.emplace_back(r.m_min + static_cast<int64_t>(rng() % cm) * r.m_step,
                        r.n_min + static_cast<int64_t>(rng() % cn) * r.n_step);
  }
  for (const auto& [m, n] : points) {
    RunConfig cfg = base;
    cfg.m = m;
    cfg.n = n;
    if (!CheckRunnable(p, cfg).ok()) return false;
  }
  return true;
}

// `r` with its steps set, its ends on them within [lo, hi] of each dimension.
ShapeRange WithSteps(ShapeRange r, const Span& m, const Span& n, int64_t m_step, int64_t n_step) {
  auto align = [](const Span& s, int64_t step, int64_t* min, int64_t* max, int64_t* out_step) {
    *min = (s.min + step - 1) / step * step;
    *max = s.max / step * step;
    *out_step = step;
  };
  align(m, m_step, &r.m_min, &r.m_max, &r.m_step);
  align(n, n_step, &r.n_min, &r.n_max, &r.n_step);
  return r;
}

}  // namespace

std::vector<int64_t> ShapeValues(int64_t min, int64_t max, int64_t step) {
  std::vector<int64_t> out;
  if (step < 1) step = 1;
  for (int64_t v = min; v <= max; v += step) out.push_back(v);
  return out;
}

ShapeRange DeriveRankedShapes(const Problem& p, int world) {
  RunConfig base;
  base.world = world;
  ShapeRange r{base.m, base.m, 1, base.n, base.n, 1};
  if (!CheckRunnable(p, base).ok()) return r;
  const ShapeLimits limits = LimitsOf(p);
  const Span m =
      DeriveDimension(p, base, base.m, limits.max_m, [](RunConfig& c, int64_t v) { c.m = v; });
  const Span n =
      DeriveDimension(p, base, base.n, limits.max_n, [](RunConfig& c, int64_t v) { c.n = v; });
  r = ShapeRange{m.min, m.max, m.step, n.min, n.max, n.step};
  // Within M * N <= max_mn: lower the maximum that is further above its default.
  while (r.m_max * r.n_max > limits.max_mn) {
    if (r.m_max * base.n >= r.n_max * base.m && r.m_max - r.m_step >= base.m) {
      r.m_max -= r.m_step;
    } else if (r.n_max - r.n_step >= base.n) {
      r.n_max -= r.n_step;
    } else {
      r.m_max -= r.m_step;  // unreachable while max_mn >= the default area
    }
  }
  // Pairs the problem rejects (M * N a multiple of a block): coarser steps, the finer one doubled
  // first, while each stays within its dimension's default; then n fixed; then the default alone.
  const Span m_span{r.m_min, r.m_max, r.m_step}, n_span{r.n_min, r.n_max, r.n_step};
  int64_t m_step = r.m_step, n_step = r.n_step;
  const bool m_varies = r.m_min < r.m_max, n_varies = r.n_min < r.n_max;
  while (!RangeRunnable(p, base, r)) {
    const bool m_can = m_varies && m_step * 2 <= base.m && base.m % (m_step * 2) == 0;
    const bool n_can = n_varies && n_step * 2 <= base.n && base.n % (n_step * 2) == 0;
    if (!m_can && !n_can) {
      r = WithSteps(r, m_span, n_span, m.step, n.step);
      r.n_min = r.n_max = base.n;
      r.n_step = 1;
      if (r.m_min < r.m_max && RangeRunnable(p, base, r)) return r;
      return ShapeRange{base.m, base.m, 1, base.n, base.n, 1};
    }
    if (m_can && (!n_can || m_step <= n_step)) {
      m_step *= 2;
    } else {
      n_step *= 2;
    }
    r = WithSteps(r, m_span, n_span, m_step, n_step);
  }
  return r;
}

ShapeRange Problem::RankedShapes(int world) const { return DeriveRankedShapes(*this, world); }

}  // namespace pkb
