#include "problems/other/fp8_delayed_scaling.h"

namespace pkb::fp8 {

Scaling UpdateScaling(const at::Tensor& x, const at::Tensor& history) {
  at::Tensor amax = x.abs().max().to(at::kFloat);
  at::Tensor hist = at::roll(history, {-1}, {0});
  hist.narrow(0, kHistoryLen - 1, 1).copy_(amax.to(hist.scalar_type()).reshape({1}));
  at::Tensor s = hist.max().clamp_min(1e-12).to(at::kFloat);
  return {hist, s * at::full({}, 1.0f / kE4m3Max, s.options())};
}

at::Tensor Codes(const at::Tensor& x, const at::Tensor& scale) {
  return (x.to(at::kFloat) / scale).to(at::kFloat8_e4m3fn);
}

at::Tensor Dequantize(const at::Tensor& codes, const at::Tensor& scale, at::ScalarType dt) {
  return (codes.to(at::kFloat) * scale).to(dt);
}

at::Tensor RoundTrip(const at::Tensor& x, const at::Tensor& scale) {
  return Dequantize(Codes(x, scale), scale, x.scalar_type());
}

at::Tensor StrongHistory(const RunConfig& cfg) {
  at::Tensor h = at::rand({kHistoryLen}, at::TensorOptions().dtype(at::kFloat).device(cfg.device));
  h = (h * 3.0 + 3.0).to(at::kBFloat16);
  h.narrow(0, 0, 1).fill_(9.0);
  return h;
}

}  // namespace pkb::fp8
