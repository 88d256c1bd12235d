// The shapes ranked runs are also timed at (docs/leaderboard.md, "Shape runs"): a range around
// the default shape that the problem accepts everywhere, so that the coordinator can draw two
// shapes a submitter cannot know in advance.
//
//   ShapeRange r = p.RankedShapes(8);            // what the catalog publishes for W = 8
//   for (int64_t m : ShapeValues(r.m_min, r.m_max, r.m_step)) ...
#ifndef PKB_PROBLEMS_HARNESS_SHAPES_H_
#define PKB_PROBLEMS_HARNESS_SHAPES_H_

#include <cstdint>
#include <vector>

#include "problems/harness/problem.h"

namespace pkb {

// The alignment of the shapes ranked runs draw, in each dimension that varies: production shapes
// are multiples of it, and a candidate may rely on it (vector loads, tiles) but not on the values.
inline constexpr int64_t kRankedShapeAlignment = 64;

// The range Problem::RankedShapes returns by default, at world size `world` (the run's default
// dtype):
//  - each dimension spans default/2 .. 2 x default (capped by LimitsOf(p)), on the smallest
//    power-of-two step from kRankedShapeAlignment (or the largest power of two below it that
//    divides the default) up to the default whose every multiple in that span CheckRunnable accepts
//    with the other dimension at its default; where no step passes, the same over default ..
//    2 x default, then over default/2 .. default;
//  - a dimension stays at its default (min = max) where no step passes, or where changing it
//    changes no input or output shape nor scalar (the problem ignores it: timing it again would
//    measure the same work);
//  - then the larger maximum is lowered, step by step, until m_max * n_max <= max_mn;
//  - then the corners, a grid and random pairs of the range are checked together; where a pair
//    fails (a rule on M * N), the finer step is doubled until all pass (p020: 16 x 8, so that
//    M * N is a multiple of 128); where no step passes, n is fixed, and then m too.
// The default shape must be runnable at `world`; otherwise the range is the default point.
ShapeRange DeriveRankedShapes(const Problem& p, int world);

// min, min + step, ..., up to max (one value when min == max).
std::vector<int64_t> ShapeValues(int64_t min, int64_t max, int64_t step);

}  // namespace pkb

#endif  // PKB_PROBLEMS_HARNESS_SHAPES_H_
