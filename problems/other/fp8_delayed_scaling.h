// Transformer-Engine-style FP8 (E4M3) delayed scaling shared by 52_fp8_reduce_scatter_grads and
// 53_fp8_allgather_params: a per-rank amax history updated with the current max |x|, one fp32
// scale from the history, and an FP8 round trip x -> E4M3 code -> run dtype.
//
// Every step is written so that the same libtorch ops give the same bits on CPU and CUDA and match
// PKB's Python on CUDA (see each function).
#ifndef PKB_PROBLEMS_OTHER_FP8_DELAYED_SCALING_H_
#define PKB_PROBLEMS_OTHER_FP8_DELAYED_SCALING_H_

#include <ATen/ATen.h>

#include "problems/harness/problem.h"

namespace pkb::fp8 {

constexpr int64_t kHistoryLen = 16;    // PKB's amax_history length
constexpr double kHistoryFill = 1e-8;  // PKB fills it with bf16(1e-8) on every trial

// The largest finite E4M3FN value.
constexpr float kE4m3Max = 448.0f;

// The statements' rule for the history and the scale (52, 53), after a = fp32(max |x|).
inline constexpr char kScalingText[] =
    R"md(  hist'[15] = bf16(a) (round to nearest even); s = fp32(max(max(hist'), 1e-12)) *
  fp32(1/448): a MULTIPLICATION by the rounded reciprocal 0x3B124925, because PKB's
  `fp32_tensor / 448.0` is computed that way by PyTorch on CUDA (an IEEE division
  gives another scale for 71 of the 128 bf16 significands, 4.5 among them).
)md";

// The updated history and the scale it gives.
struct Scaling {
  at::Tensor history;  // (16,) bf16: hist'[i] = hist[i + 1], hist'[15] = bf16(fp32(max |x|))
  at::Tensor scale;    // () fp32
};

// PKB: a = fp32(max |x|) (the max in the run dtype), hist' = roll(hist, -1) with hist'[15] =
// bf16(a), s = fp32(clamp_min(max(hist'), 1e-12)) / 448. The last division is PKB's
// `fp32 tensor / 448.0`, which PyTorch's CUDA kernel computes as a MULTIPLICATION by the rounded
// reciprocal fp32(1/448) when the divisor is a Python number (div_true_kernel_cuda); an IEEE
// division gives another fp32 value for 71 of the 128 bf16 significands (4.5, PKB's typical amax,
// among them). The explicit product gives CUDA's bits on CPU too.
Scaling UpdateScaling(const at::Tensor& x, const at::Tensor& history);

// E4M3FN codes of fp32(x) / scale: an IEEE fp32 division (PKB divides by a 0-d CUDA tensor, which
// is a true division) and the round-to-nearest-even cast, which keeps subnormals (steps of 2^-9)
// and would give NaN only from 464 up (|x / s| <= ~449.8 here, so it rounds to 448 at most).
at::Tensor Codes(const at::Tensor& x, const at::Tensor& scale);

// dt(fp32(code) * scale): the product rounded to fp32, then to the run dtype.
at::Tensor Dequantize(const at::Tensor& codes, const at::Tensor& scale, at::ScalarType dt);

// PKB's _fp8_round_trip_bf16 (which is not bf16-specific: it returns x's dtype).
at::Tensor RoundTrip(const at::Tensor& x, const at::Tensor& scale);

// The stronger input sets' amax history (set > 0). PKB's history is a constant 1e-8, so the
// scale always comes from the current amax and the roll direction and the dropped oldest entry
// cannot be seen. These sets draw 16 amaxes in [3, 6) around the typical current amax (~4.5 for
// randn), so the scale often comes from an older entry, and put 9 in the oldest slot, which the
// roll must drop (keeping it would make the scale 9/448).
at::Tensor StrongHistory(const RunConfig& cfg);

}  // namespace pkb::fp8

#endif  // PKB_PROBLEMS_OTHER_FP8_DELAYED_SCALING_H_
