// Problem 53 — FP8 (E4M3) round trip of each rank's parameter shard with Transformer-Engine-style
// delayed scaling (per-rank amax history), then an all-gather of the dequantized shards.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "problems/harness/common.h"
#include "problems/harness/registry.h"
#include "problems/other/fp8_delayed_scaling.h"

namespace pkb {
namespace {

// PKB's shard length: clamp(64 M, 64, 4096) (4096 from M = 64 up).
int64_t ShardLen(const RunConfig& cfg) { return std::clamp<int64_t>(64 * cfg.m, 64, 4096); }

class Fp8AllGatherParams : public Problem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        53,
        "53_fp8_allgather_params",
        1,
        "Transformer-Engine-style FP8 parameter all-gather (E4M3, delayed scaling with an amax "
        "history)",
        "ZeRO/FSDP (communication)",
        R"md(FP8 parameter all-gather: every rank updates its own amax history, quantizes its
parameter shard to float8_e4m3fn with the resulting scale, dequantizes it back to the
run dtype, and the dequantized shards are gathered over WORLD.

- Any W. P = clamp(64 M, 64, 4096) (4096 at the default M = 1024).
- Inputs per rank r (on the device):
  `flat_param_shard` (P,) run dtype, randn, different per rank; `amax_history` (16,)
  bfloat16. In set 0 (PKB's) the history is filled with bf16(1e-8); the other sets
  then draw it as bf16(3 + 3 rand(16)) with entry 0 set to 9 (so the scale often comes
  from an older entry, and the oldest entry, which the roll drops, is the largest).
- Computation, on each rank with its own values (nothing is reduced across ranks):
  a = fp32(max |x|) (max in the run dtype); hist'[i] = hist[i + 1] for i < 15,
)md" + std::string(fp8::kScalingText) +
            R"md(  code = e4m3fn(fp32(x) / s): an IEEE fp32 division (not x * (1/s), not an
  approximate division), round to nearest even, subnormals kept (|x / s| <= 449.8,
  which rounds to 448 at most). recon = dt(fp32(code) * s) (the product rounded to
  fp32, then to the run dtype). full = concatenation of every rank's recon in rank
  order.
- Outputs: `full` (W P,) run dtype, identical on all ranks (block q uses rank q's
  scale); `amax_history` (16,) bfloat16 = this rank's hist'.
- Both outputs are compared BIT FOR BIT. One E4M3 step is 6-12% of the value, so a
  code off by one fails; PKB's own atol = rtol = 1e-2 misses such a flip for |x| < ~0.1.
  The computation has exactly one answer: send the codes and the scale, or the
  dequantized values, as you like, but reproduce s and the division exactly.
- Traffic: the reference gathers the run dtype, (W-1) P b bytes each way per rank;
  gathering the FP8 codes and the fp32 scale needs (W-1) (P + 4). FLOPs ~5 P.)md"};
    return i;
  }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    return RequirePositiveShape(cfg);
  }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    Inputs in;
    in.Add("flat_param_shard", at::randn({ShardLen(cfg)}, Opts(cfg)));
    in.Add("amax_history", set == 0 ? at::full({fp8::kHistoryLen}, fp8::kHistoryFill,
                                               Opts(cfg).dtype(at::kBFloat16))
                                    : fp8::StrongHistory(cfg));
    return in;
  }

  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    return {{"full", {cfg.world * ShardLen(cfg)}, cfg.dtype},
            {"amax_history", {fp8::kHistoryLen}, at::kBFloat16}};
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    fp8::Scaling sc = fp8::UpdateScaling(in[0], in[1]);
    at::Tensor recon = fp8::RoundTrip(in[0], sc.scale).contiguous();
    at::Tensor full = at::empty({comm.size() * recon.size(0)}, recon.options());
    PKB_RETURN_IF_ERROR(comm.AllGatherInto(full, recon));
    return std::vector<at::Tensor>{full, sc.history};
  }

  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    std::vector<at::Tensor> recons, histories;
    for (const auto& in : all) {
      fp8::Scaling sc = fp8::UpdateScaling(in[0], in[1]);
      recons.push_back(fp8::RoundTrip(in[0], sc.scale));
      histories.push_back(sc.history);
    }
    at::Tensor full = at::cat(recons, 0);
    std::vector<std::vector<at::Tensor>> out;
    for (const auto& h : histories) out.push_back({full, h});
    return out;
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    if (index == 0) {
      return {0, 0, true,
              "Bit-exact: each element is dt(fp32(code) * s) of one E4M3 code and its source "
              "rank's scale, and the gather moves it unchanged, so a correct kernel has exactly "
              "one answer. Distinct codes give distinct values in every run dtype, so this is "
              "the same as comparing codes: one code one step off (6-12% of the value) fails, "
              "also below |x| ~ 0.1 where PKB's atol = 1e-2 would pass it; so do truncation "
              "instead of rounding, an IEEE-divided or all-reduced scale that moves any code, "
              "and a block gathered from the wrong rank."};
    }
    return {0, 0, true,
            "Bit-exact: hist' is the input history shifted left by one with bf16(fp32(max|x|)) "
            "appended, all bf16 values copied or rounded once. The stronger sets' non-constant "
            "history shows a roll in the wrong direction."};
  }

  Roofline GetRoofline(const RunConfig& cfg) const override {
    const double b = ElementBytes(cfg.dtype);
    const double p = ShardLen(cfg);
    Roofline r;
    r.nvlink_bytes = (cfg.world - 1) * (p + 4.0);  // codes and the fp32 scale suffice
    r.hbm_bytes = p * b + cfg.world * p * b;       // read the shard, write the gathered vector
    r.flops = 5.0 * p;
    r.collective_bytes = cfg.world * p * b;  // the reference's all-gather of the run dtype
    r.busbw_factor = AllGatherFactor(cfg.world);
    return r;
  }
};
PKB_REGISTER_PROBLEM(Fp8AllGatherParams);

}  // namespace
}  // namespace pkb
