#include "problems/harness/check.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pkb {
namespace {

// Poison bit patterns per element size, two variants each.
uint64_t PoisonBits(at::ScalarType t, int variant) {
  bool v = variant & 1;
  switch (t) {
    case at::kBFloat16:
      return v ? 0x7FB2 : 0x7FA1;  // NaN payloads
    case at::kHalf:
      return v ? 0x7EB2 : 0x7EA1;
    case at::kFloat:
      return v ? 0x7FB2B2B2 : 0x7FA1A1A1;
    case at::kDouble:
      return v ? 0x7FF4B2B2B2B2B2B2ull : 0x7FF4A1A1A1A1A1A1ull;
    case at::kFloat8_e4m3fn:
      return 0x7F;  // the only NaN encodings
    case at::kFloat8_e5m2:
      return v ? 0x7E : 0x7F;
    case at::kBool:
      return v ? 0xB2 : 0xA1;  // neither is a valid bool
    case at::kComplexFloat:
      return v ? 0x7FB2B2B27FB2B2B2ull : 0x7FA1A1A17FA1A1A1ull;
    default: {
      uint64_t byte = v ? 0xB2 : 0xA1;
      uint64_t bits = 0;
      for (size_t i = 0; i < c10::elementSize(t); ++i) bits |= byte << (8 * i);
      return bits;
    }
  }
}

at::ScalarType BitsType(size_t element_size) {
  switch (element_size) {
    case 1:
      return at::kByte;
    case 2:
      return at::kShort;
    case 4:
      return at::kInt;
    default:
      return at::kLong;
  }
}

at::Tensor AsBits(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  return c.view(BitsType(c10::elementSize(t.scalar_type()))).reshape({-1});
}

int64_t SignExtendBits(uint64_t bits, size_t size) {
  if (size >= 8) return static_cast<int64_t>(bits);
  int shift = 64 - 8 * static_cast<int>(size);
  return static_cast<int64_t>(bits << shift) >> shift;
}

at::Tensor AsComparable(const at::Tensor& t) {
  at::Tensor x = t;
  if (x.is_complex()) x = at::view_as_real(x.contiguous());
  return x.to(at::kDouble).reshape({-1});
}

}  // namespace

void Poison(at::Tensor& t, int variant) {
  if (t.numel() == 0) return;
  size_t size = c10::elementSize(t.scalar_type());
  uint64_t bits = PoisonBits(t.scalar_type(), variant);
  at::Tensor view = t.view(BitsType(size));
  view.fill_(SignExtendBits(bits, size));
}

int64_t CountPoisoned(const at::Tensor& t, int variant) {
  if (t.numel() == 0) return 0;
  size_t size = c10::elementSize(t.scalar_type());
  int64_t bits = SignExtendBits(PoisonBits(t.scalar_type(), variant), size);
  return AsBits(t).eq(bits).sum().item<int64_t>();
}

v1::OutputCheck CompareOutput(const at::Tensor& actual, const at::Tensor& expected,
                              const Tolerance& tol, int poison_variant) {
  v1::OutputCheck r;
  r.set_atol(tol.exact ? 0 : tol.atol);
  r.set_rtol(tol.exact ? 0 : tol.rtol);
  r.set_numel(expected.numel());
  r.set_first_bad_index(-1);
  if (actual.sizes() != expected.sizes()) {
    r.set_problem(absl::StrCat("shape [", absl::StrJoin(actual.sizes(), ", "), "] != expected [",
                               absl::StrJoin(expected.sizes(), ", "), "]"));
    r.set_bad_count(expected.numel());
    return r;
  }
  if (actual.scalar_type() != expected.scalar_type()) {
    r.set_problem(absl::StrCat("dtype ", DtypeName(actual.scalar_type()), " != expected ",
                               DtypeName(expected.scalar_type())));
    r.set_bad_count(expected.numel());
    return r;
  }
  if (expected.numel() == 0) {
    r.set_ok(true);
    return r;
  }
  at::Tensor a = AsComparable(actual);
  at::Tensor e = AsComparable(expected).to(a.device());
  at::Tensor diff = (a - e).abs();
  at::Tensor bad;
  if (tol.exact) {
    at::Tensor ab = AsBits(actual), eb = AsBits(expected).to(ab.device());
    at::Tensor bitbad = ab.ne(eb);
    // Bits per element: complex has two float parts; map back to element granularity.
    bad = bitbad.reshape({a.numel(), -1}).any(1);
  } else {
    at::Tensor thr = tol.atol + tol.rtol * e.abs();
    bad = diff.le(thr).logical_not();  // NaN compares false, so NaN is bad
    if (tol.outlier_fraction > 0) {
      at::Tensor loose = diff.le(tol.outlier_atol + tol.outlier_rtol * e.abs()).logical_not();
      const double allowed = std::ceil(tol.outlier_fraction * static_cast<double>(e.numel()));
      if (!loose.any().item<bool>() && bad.sum().item<int64_t>() <= allowed) bad = loose;
    }
  }
  at::Tensor nan = a.isfinite().logical_not().logical_and(e.isfinite());
  at::Tensor finite_diff = at::where(diff.isfinite(), diff, at::zeros_like(diff));
  r.set_max_abs_error(diff.isfinite().all().item<bool>() ? diff.max().item<double>() : INFINITY);
  at::Tensor rel = finite_diff / e.abs().clamp_min(1e-30);
  rel = at::where(e.abs().gt(0), rel, at::zeros_like(rel));
  r.set_max_rel_error(rel.max().item<double>());
  int64_t bad_count = bad.sum().item<int64_t>();
  r.set_bad_count(bad_count);
  r.set_nan_count(nan.sum().item<int64_t>());
  r.set_unwritten_count(CountPoisoned(actual, poison_variant));
  if (bad_count > 0) {
    int64_t first = bad.nonzero().min().item<int64_t>();
    r.set_first_bad_index(first);
    r.set_expected_at_first_bad(e[first].item<double>());
    r.set_actual_at_first_bad(a[first].item<double>());
  }
  r.set_ok(bad_count == 0 && r.unwritten_count() == 0);
  if (!r.ok() && bad_count == 0) r.set_bad_count(r.unwritten_count());
  return r;
}

std::string DtypeName(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16:
      return "bfloat16";
    case at::kHalf:
      return "float16";
    case at::kFloat:
      return "float32";
    case at::kDouble:
      return "float64";
    case at::kLong:
      return "int64";
    case at::kInt:
      return "int32";
    case at::kByte:
      return "uint8";
    case at::kChar:
      return "int8";
    case at::kBool:
      return "bool";
    case at::kFloat8_e4m3fn:
      return "float8_e4m3fn";
    case at::kFloat8_e5m2:
      return "float8_e5m2";
    case at::kComplexFloat:
      return "complex64";
    default:
      return c10::toString(t);
  }
}

absl::StatusOr<at::ScalarType> DtypeFromName(const std::string& name) {
  for (at::ScalarType t : {at::kBFloat16, at::kHalf, at::kFloat, at::kDouble}) {
    if (DtypeName(t) == name) return t;
  }
  if (name == "bf16") return at::kBFloat16;
  if (name == "fp16") return at::kHalf;
  if (name == "fp32") return at::kFloat;
  if (name == "fp64") return at::kDouble;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown run dtype '", name, "' (expected bfloat16, float16, float32 or float64)"));
}

}  // namespace pkb
