#include "worker/engine/candidate_loader.h"

#include <dlfcn.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace pkb {

absl::StatusOr<Candidate> LoadCandidate(const std::string& path) {
  Candidate c;
  c.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!c.handle)
    return absl::FailedPreconditionError(absl::StrCat("cannot load candidate: ", dlerror()));
  auto* version = static_cast<const uint32_t*>(dlsym(c.handle, "pkb_candidate_api_version"));
  if (!version) {
    return absl::InvalidArgumentError(
        "the candidate does not declare its API version: add `PKB_CANDIDATE_API_V1;` at file "
        "scope");
  }
  if (*version != PKB_API_VERSION) {
    return absl::InvalidArgumentError(absl::StrCat("the candidate was written for API version ",
                                                   *version, "; this harness offers ",
                                                   PKB_API_VERSION));
  }
  c.run = reinterpret_cast<pkb_run_fn>(dlsym(c.handle, "pkb_run"));
  if (!c.run) {
    return absl::InvalidArgumentError("the candidate exports no `extern \"C\" int pkb_run(...)`");
  }
  c.init = reinterpret_cast<pkb_init_fn>(dlsym(c.handle, "pkb_init"));
  return c;
}

// The candidate API's dtypes and ATen's, one table for both directions (pkb/aten_core.h, a
// public header that must stand alone, spells the same mapping for candidates).
struct DtypeEntry {
  int32_t pkb;
  at::ScalarType aten;
};
constexpr DtypeEntry kDtypes[] = {
    {PKB_BFLOAT16, at::kBFloat16},
    {PKB_FLOAT16, at::kHalf},
    {PKB_FLOAT32, at::kFloat},
    {PKB_FLOAT64, at::kDouble},
    {PKB_INT64, at::kLong},
    {PKB_INT32, at::kInt},
    {PKB_UINT8, at::kByte},
    {PKB_INT8, at::kChar},
    {PKB_BOOL, at::kBool},
    {PKB_FLOAT8_E4M3, at::kFloat8_e4m3fn},
    {PKB_FLOAT8_E5M2, at::kFloat8_e5m2},
    {PKB_COMPLEX64, at::kComplexFloat},
};

absl::StatusOr<pkb_tensor> ToPkbTensor(const at::Tensor& t) {
  pkb_tensor p{};
  if (t.dim() > PKB_MAX_DIMS) return absl::InvalidArgumentError("tensor has too many dimensions");
  p.data = t.data_ptr();
  p.ndim = static_cast<int32_t>(t.dim());
  for (int i = 0; i < t.dim(); ++i) {
    p.shape[i] = t.size(i);
    p.strides[i] = t.stride(i);
  }
  const auto* entry = std::find_if(std::begin(kDtypes), std::end(kDtypes),
                                   [&](const DtypeEntry& e) { return e.aten == t.scalar_type(); });
  if (entry == std::end(kDtypes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("no candidate dtype for ", c10::toString(t.scalar_type())));
  }
  p.dtype = entry->pkb;
  p.device_type = t.is_cuda() ? PKB_CUDA : PKB_CPU;
  p.device_index = t.is_cuda() ? t.get_device() : 0;
  return p;
}

absl::StatusOr<at::ScalarType> ScalarTypeOfPkb(int32_t dtype) {
  for (const DtypeEntry& e : kDtypes) {
    if (e.pkb == dtype) return e.aten;
  }
  return absl::InvalidArgumentError(absl::StrCat("no pkb_dtype ", dtype));
}

std::vector<pkb_scalar> ToPkbScalars(const std::vector<ScalarArg>& args) {
  std::vector<pkb_scalar> out;
  for (const auto& a : args) {
    out.push_back({a.name.c_str(), a.is_int ? PKB_SCALAR_INT : PKB_SCALAR_FLOAT, a.i, a.f});
  }
  return out;
}

}  // namespace pkb
