// pkb/aten_core.h — the ATen glue of pkb/aten.h without all of ATen: at::Tensor (with its
// methods), at::from_blob, the CUDA stream guard, pkb::as_tensor, pkb::use_stream and
// pkb::to_scalar_type. Each other at:: function a candidate calls needs its own header,
// <ATen/ops/NAME.h> for at::NAME and at::NAME_out (<ATen/ops/matmul.h> for at::matmul_out): a
// compile then takes about half to two thirds of pkb/aten.h's.
//
//   #include <ATen/ops/matmul.h>
//   #include <pkb/aten_core.h>
//   auto guard = pkb::use_stream(ctx);            // ATen ops now run on ctx->stream
//   at::Tensor c = pkb::as_tensor(out[0]);        // a view, no copy
//   at::matmul_out(c, pkb::as_tensor(in[0]), pkb::as_tensor(in[1]));
#ifndef PKB_ATEN_CORE_H_
#define PKB_ATEN_CORE_H_

#include <ATen/core/Tensor.h>
#include <ATen/ops/from_blob.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <memory>

#include "pkb/candidate.h"

namespace pkb {

inline at::ScalarType to_scalar_type(int32_t dtype) {
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
      return at::kByte;
  }
}

// A view of the harness's memory as an at::Tensor (the harness owns it).
inline at::Tensor as_tensor(const pkb_tensor& t) {
  at::TensorOptions o = at::TensorOptions().dtype(to_scalar_type(t.dtype));
  o = t.device_type == PKB_CUDA ? o.device(at::kCUDA, t.device_index) : o.device(at::kCPU);
  return at::from_blob(t.data, at::IntArrayRef(t.shape, t.ndim), at::IntArrayRef(t.strides, t.ndim),
                       o);
}

// Makes ATen ops of this thread run on ctx->stream while the returned guard lives.
inline std::unique_ptr<c10::cuda::CUDAStreamGuard> use_stream(pkb_context* ctx) {
  auto s = c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(ctx->stream),
                                            static_cast<c10::DeviceIndex>(ctx->device_index));
  return std::make_unique<c10::cuda::CUDAStreamGuard>(s);
}

}  // namespace pkb

#endif  // PKB_ATEN_CORE_H_
