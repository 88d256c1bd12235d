#include "worker/engine/candidate_loader.h"

#include <dlfcn.h>

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

absl::StatusOr<pkb_tensor> ToPkbTensor(const at::Tensor& t) {
  pkb_tensor p{};
  if (t.dim() > PKB_MAX_DIMS) return absl::InvalidArgumentError("tensor has too many dimensions");
  p.data = t.data_ptr();
  p.ndim = static_cast<int32_t>(t.dim());
  for (int i = 0; i < t.dim(); ++i) {
    p.shape[i] = t.size(i);
    p.strides[i] = t.stride(i);
  }
  switch (t.scalar_type()) {
    case at::kBFloat16:
      p.dtype = PKB_BFLOAT16;
      break;
    case at::kHalf:
      p.dtype = PKB_FLOAT16;
      break;
    case at::kFloat:
      p.dtype = PKB_FLOAT32;
      break;
    case at::kDouble:
      p.dtype = PKB_FLOAT64;
      break;
    case at::kLong:
      p.dtype = PKB_INT64;
      break;
    case at::kInt:
      p.dtype = PKB_INT32;
      break;
    case at::kByte:
      p.dtype = PKB_UINT8;
      break;
    case at::kChar:
      p.dtype = PKB_INT8;
      break;
    case at::kBool:
      p.dtype = PKB_BOOL;
      break;
    case at::kFloat8_e4m3fn:
      p.dtype = PKB_FLOAT8_E4M3;
      break;
    case at::kFloat8_e5m2:
      p.dtype = PKB_FLOAT8_E5M2;
      break;
    case at::kComplexFloat:
      p.dtype = PKB_COMPLEX64;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("no candidate dtype for ", c10::toString(t.scalar_type())));
  }
  p.device_type = t.is_cuda() ? PKB_CUDA : PKB_CPU;
  p.device_index = t.is_cuda() ? t.get_device() : 0;
  return p;
}

absl::StatusOr<at::ScalarType> ScalarTypeOfPkb(int32_t dtype) {
  switch (dtype) {
    case PKB_BFLOAT16:
      return at::kBFloat16;
    case PKB_FLOAT16:
      return at::kHalf;
    case PKB_FLOAT32:
      return at::kFloat;
    case PKB_FLOAT64:
      return at::kDouble;
    case PKB_INT64:
      return at::kLong;
    case PKB_INT32:
      return at::kInt;
    case PKB_UINT8:
      return at::kByte;
    case PKB_INT8:
      return at::kChar;
    case PKB_BOOL:
      return at::kBool;
    case PKB_FLOAT8_E4M3:
      return at::kFloat8_e4m3fn;
    case PKB_FLOAT8_E5M2:
      return at::kFloat8_e5m2;
    case PKB_COMPLEX64:
      return at::kComplexFloat;
    default:
      return absl::InvalidArgumentError(absl::StrCat("no pkb_dtype ", dtype));
  }
}

std::vector<pkb_scalar> ToPkbScalars(const std::vector<ScalarArg>& args) {
  std::vector<pkb_scalar> out;
  for (const auto& a : args) {
    out.push_back({a.name.c_str(), a.is_int ? PKB_SCALAR_INT : PKB_SCALAR_FLOAT, a.i, a.f});
  }
  return out;
}

}  // namespace pkb
