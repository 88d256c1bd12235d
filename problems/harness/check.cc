#include "problems/harness/check.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "problems/harness/ties.h"

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
      // Elements wider than 8 bytes (complex double) are poisoned 8 bytes at a time (Poison).
      for (size_t i = 0; i < std::min<size_t>(c10::elementSize(t), 8); ++i) bits |= byte << (8 * i);
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

PoisonFill PoisonPattern(at::ScalarType dtype, int variant) {
  const int bytes = static_cast<int>(std::min<size_t>(c10::elementSize(dtype), 8));
  return {PoisonBits(dtype, variant), bytes};
}

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
    double atol = tol.atol;
    double outlier_atol = tol.outlier_atol;
    if (tol.atol_mean_abs > 0) {
      const at::Tensor finite = e.abs().masked_select(e.isfinite().logical_and(e.ne(0)));
      const double scaled = finite.numel() ? tol.atol_mean_abs * finite.mean().item<double>() : 0;
      atol += scaled;
      outlier_atol += scaled;
      r.set_atol(atol);
    }
    at::Tensor thr = atol + tol.rtol * e.abs();
    bad = diff.le(thr).logical_not();  // NaN compares false, so NaN is bad
    if (tol.outlier_fraction > 0) {
      at::Tensor loose = diff.le(outlier_atol + tol.outlier_rtol * e.abs()).logical_not();
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

namespace {

absl::StatusOr<int64_t> RowCount(const std::vector<at::Tensor>& outs, int k, size_t of) {
  if (k < 0 || static_cast<size_t>(k) >= outs.size() || outs[k].dim() != 0 ||
      outs[k].scalar_type() != at::kLong) {
    return absl::InternalError(absl::StrCat("output ", of, " takes its row count from output ", k,
                                            ", which is not a 0-d int64 output"));
  }
  return outs[k].item<int64_t>();
}

}  // namespace

absl::Status CheckAgainstDeclaration(const std::vector<OutputDecl>& decls,
                                     const std::vector<at::Tensor>& outputs) {
  if (outputs.size() != decls.size()) {
    return absl::InternalError(absl::StrCat(outputs.size(), " outputs returned, ", decls.size(),
                                            " declared"));
  }
  for (size_t i = 0; i < decls.size(); ++i) {
    const OutputDecl& d = decls[i];
    const at::Tensor& t = outputs[i];
    if (t.scalar_type() != d.dtype) {
      return absl::InternalError(absl::StrCat("output ", i, " (", d.name, ") is ",
                                              DtypeName(t.scalar_type()), ", declared ",
                                              DtypeName(d.dtype)));
    }
    std::vector<int64_t> shape = t.sizes().vec();
    if (d.rows_from >= 0) {
      PKB_ASSIGN_OR_RETURN(int64_t rows, RowCount(outputs, d.rows_from, i));
      if (shape.empty() || shape[0] != rows || rows > d.shape.at(0)) {
        return absl::InternalError(absl::StrCat(
            "output ", i, " (", d.name, ") has shape [", absl::StrJoin(shape, ", "),
            "]: its row count says ", rows, " and its capacity is ", d.shape.at(0)));
      }
      shape[0] = d.shape[0];
    }
    if (shape != d.shape) {
      return absl::InternalError(absl::StrCat("output ", i, " (", d.name, ") has shape [",
                                              absl::StrJoin(t.sizes(), ", "), "], declared [",
                                              absl::StrJoin(d.shape, ", "), "]"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::OutputCheck>> CompareOutputs(
    const Problem& p, const RunConfig& cfg, const std::vector<OutputDecl>& decls,
    const std::vector<at::Tensor>& actual, const std::vector<at::Tensor>& expected,
    int poison_variant) {
  return CompareOutputs(p, cfg, decls, actual, expected, poison_variant, {});
}

absl::StatusOr<std::vector<v1::OutputCheck>> CompareOutputs(
    const Problem& p, const RunConfig& cfg, const std::vector<OutputDecl>& decls,
    const std::vector<at::Tensor>& actual, const std::vector<at::Tensor>& expected,
    int poison_variant, const std::vector<at::Tensor>& tie_keys) {
  PKB_RETURN_IF_ERROR(CheckAgainstDeclaration(decls, expected));
  if (actual.size() != decls.size()) {
    return absl::InternalError(absl::StrCat(actual.size(), " outputs allocated, ", decls.size(),
                                            " declared"));
  }
  std::vector<at::Tensor> resolved = actual;
  if (const TieRule* rule = TieRuleOf(p)) {
    if (tie_keys.empty()) {
      return absl::InternalError(absl::StrCat(
          p.info().slug, " accepts any valid tie order: compare it with its tie keys (ties.h)"));
    }
    PKB_ASSIGN_OR_RETURN(resolved, rule->ResolveTies(cfg, expected, tie_keys, actual));
    if (resolved.size() != actual.size()) {
      return absl::InternalError(absl::StrCat(p.info().slug, ": ResolveTies returned ",
                                              resolved.size(), " outputs for ", actual.size()));
    }
  }
  std::vector<bool> is_count(decls.size(), false);
  for (const auto& d : decls) {
    if (d.rows_from >= 0) is_count[d.rows_from] = true;
  }
  std::vector<v1::OutputCheck> checks;
  for (size_t i = 0; i < decls.size(); ++i) {
    Tolerance tol = p.GetTolerance(cfg, static_cast<int>(i));
    if (is_count[i]) tol.exact = true;  // a row count is never approximately right
    at::Tensor got = resolved[i];
    v1::OutputCheck c;
    if (decls[i].rows_from >= 0) {
      const int k = decls[i].rows_from;
      const int64_t want = expected[k].item<int64_t>();
      // The candidate's count sits in its own output k (poison if it never wrote one).
      const int64_t have = actual[k].item<int64_t>();
      if (have != want) {
        c = CompareOutput(got, expected[i], tol, poison_variant);  // shapes differ: fails
        c.set_problem(absl::StrCat("row count ", have, " (output '", decls[k].name,
                                   "') != expected ", want));
        c.set_ok(false);
        c.set_bad_count(expected[i].numel());
      } else {
        c = CompareOutput(got.narrow(0, 0, want), expected[i], tol, poison_variant);
      }
    } else {
      c = CompareOutput(got, expected[i], tol, poison_variant);
    }
    c.set_index(static_cast<int>(i));
    c.set_name(decls[i].name);
    checks.push_back(std::move(c));
  }
  return checks;
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
