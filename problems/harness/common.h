// Helpers that many problem files share: constraint messages, fills, list arguments, and
// roofline factors.
#ifndef PKB_PROBLEMS_HARNESS_COMMON_H_
#define PKB_PROBLEMS_HARNESS_COMMON_H_

#include <ATen/ATen.h>

#include <cmath>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "problems/harness/problem.h"

namespace pkb {

// Requires `divisor` to divide `value`; the message names the problem's rule.
inline absl::Status RequireDivides(int64_t divisor, int64_t value, const char* what) {
  if (divisor <= 0 || value % divisor != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", divisor, " does not divide ", value));
  }
  return absl::OkStatus();
}

inline absl::Status RequirePositiveShape(const RunConfig& cfg) {
  if (cfg.m <= 0 || cfg.n <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("M and N must be positive (got M=", cfg.m, ", N=", cfg.n, ")"));
  }
  if (cfg.world < 1) return absl::InvalidArgumentError("world size must be at least 1");
  return absl::OkStatus();
}

inline at::TensorOptions Opts(const RunConfig& cfg) {
  return at::TensorOptions().dtype(cfg.dtype).device(cfg.device);
}

// PKB's fixed fill for input set 0; seeded random integers in [-8, 8) for the other sets, whose
// sums over up to 8 ranks stay exact in bf16 (|sum| <= 64), so exact checks still apply.
inline at::Tensor FilledOrRandomInts(const RunConfig& cfg, at::IntArrayRef shape, double fill,
                                     int set) {
  if (set == 0) return at::full(shape, fill, Opts(cfg));
  return at::randint(-8, 8, shape, Opts(cfg));
}

// A Python list of ints among the reference's arguments (split sizes, a shape): the candidate ABI
// has no lists, so it travels as the int scalars `name[0]`, `name[1]`, ... in order.
inline void AddIntList(Inputs& in, const std::string& name, const std::vector<int64_t>& values) {
  for (size_t i = 0; i < values.size(); ++i) {
    in.scalars.push_back(ScalarArg::Int(absl::StrCat(name, "[", i, "]"), values[i]));
  }
}

// The list AddIntList stored under `name` (its elements are consecutive, in order), or NOT_FOUND.
inline absl::StatusOr<std::vector<int64_t>> IntList(const Inputs& in, const std::string& name) {
  std::vector<int64_t> values;
  for (const ScalarArg& a : in.scalars) {
    if (a.is_int && a.name == absl::StrCat(name, "[", values.size(), "]")) values.push_back(a.i);
  }
  if (values.empty()) return absl::NotFoundError(absl::StrCat("no int list argument '", name, "'"));
  return values;
}

// Unit roundoff (half an ulp, relative) of a floating dtype: 2^-8 for bf16.
inline double UnitRoundoff(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16:
      return std::ldexp(1.0, -8);
    case at::kHalf:
      return std::ldexp(1.0, -11);
    case at::kFloat:
      return std::ldexp(1.0, -24);
    default:
      return std::ldexp(1.0, -53);
  }
}

// nccl-tests' bus-bandwidth factors.
inline double AllReduceFactor(int w) { return 2.0 * (w - 1) / w; }
inline double AllGatherFactor(int w) { return static_cast<double>(w - 1) / w; }

}  // namespace pkb

#endif  // PKB_PROBLEMS_HARNESS_COMMON_H_
