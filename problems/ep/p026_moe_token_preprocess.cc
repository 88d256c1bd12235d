// Problem 26 — MoE expert-parallel dispatch bookkeeping: per-expert token counts from a top-2
// expert mask, all-gathered over WORLD, turned into the all-to-all split sizes and the per-local-
// expert counts.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "problems/ep/moe_pipeline.h"
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

constexpr int64_t kExperts = 8;
constexpr int64_t kTopK = 2;

at::Tensor HostLongs(const std::vector<int64_t>& v) {
  return at::tensor(v, at::TensorOptions().dtype(at::kLong));
}

class MoeTokenPreprocess : public Problem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        26,
        "26_moe_token_preprocess",
        1,
        "generic (MoE expert-parallel dispatch bookkeeping: all-to-all split sizes from routing "
        "counts)",
        "expert parallel",
        R"md(Bookkeeping before an expert-parallel MoE dispatch: E = 8 experts, top-2, over WORLD.
Rank r owns the L = 8/W experts [r L, (r+1) L). Requires W | 8 (W = 1, 2, 4 or 8).

- Inputs per rank r (on the device): sel = randint(0, 8,
  (M, 2)) int64 (the two slots are independent: a token may pick the same expert twice);
  `expert_mask` = one_hot(sel, 8).float().permute(2, 1, 0): (8, 2, M) float32, 0/1, a
  NON-CONTIGUOUS view (strides (1, 8, 16) elements; honour the strides). Scalar
  num_experts = 8. Every rank's mask differs.
- Computation: cnt[e] = sum over slots and tokens of expert_mask[e] (8,) fp32 (a token
  that picked e in both slots counts twice). input_splits[s] = sum of cnt over rank s's
  experts. G (W, 8) = all-gather of cnt over WORLD (row s = rank s's cnt). G_loc =
  G[:, r L:(r+1) L] (W, L). output_splits[s] = sum_l G_loc[s, l]; per_expert_total[l] =
  sum_s G_loc[s, l].
- Outputs, in order: `input_splits` (W,) int64; `output_splits` (W,) int64;
  `num_global_tokens_per_local_expert` = G_loc (W, L) float32;
  `num_global_sum_tokens_per_local_expert` = per_expert_total (L,) float32. PKB returns
  them on the host (the reference reads the counts back with .tolist()); here they are
  device buffers allocated by the harness, so a candidate need not synchronize the host.
  All are exact integers (sum of input_splits = 2M): compared bit for bit.
- Traffic: an all-gather of 8 fp32 per rank ((W-1) * 32 bytes each way): pure latency.
  Reading the mask (64 M bytes) dominates the memory traffic; ~16 M additions.)md"};
    return i;
  }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    PKB_RETURN_IF_ERROR(RequirePositiveShape(cfg));
    if (kExperts % cfg.world != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the 8 experts are split evenly over the ranks (L = 8/W local experts each): W = ",
          cfg.world, " must divide 8 (W = 1, 2, 4 or 8)"));
    }
    return absl::OkStatus();
  }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    at::Tensor sel = at::randint(0, kExperts, {cfg.m, kTopK},
                                 at::TensorOptions().dtype(at::kLong).device(cfg.device));
    Inputs in;
    in.Add("expert_mask", at::one_hot(sel, kExperts).to(at::kFloat).permute({2, 1, 0}));
    in.scalars.push_back(ScalarArg::Int("num_experts", kExperts));
    return in;
  }

  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    const int64_t w = cfg.world, local = kExperts / std::max(1, cfg.world);
    return {{"input_splits", {w}, at::kLong},
            {"output_splits", {w}, at::kLong},
            {"num_global_tokens_per_local_expert", {w, local}, at::kFloat},
            {"num_global_sum_tokens_per_local_expert", {local}, at::kFloat}};
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    const int64_t w = comm.size(), local = kExperts / w, r = comm.rank();
    at::Tensor cnt = in[0].sum({1, 2}).contiguous();  // (E) fp32
    std::vector<int64_t> input_splits = ToHostLongs(cnt.reshape({w, local}).sum(1));
    at::Tensor gathered = at::empty({w, kExperts}, cnt.options());
    PKB_RETURN_IF_ERROR(comm.AllGatherInto(gathered, cnt));
    at::Tensor mine = gathered.narrow(1, r * local, local).contiguous();  // (W, L)
    std::vector<int64_t> output_splits = ToHostLongs(mine.sum(1));
    // PKB hands all four back on the host.
    return std::vector<at::Tensor>{HostLongs(input_splits), HostLongs(output_splits),
                                   mine.to(at::kCPU), mine.sum(0).to(at::kCPU)};
  }

  // Host loops over each rank's mask, one expert at a time; no collective.
  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    const int64_t w = static_cast<int64_t>(all.size()), local = kExperts / w;
    std::vector<std::vector<int64_t>> cnt(w, std::vector<int64_t>(kExperts));
    for (int64_t s = 0; s < w; ++s) {
      at::Tensor mask = all[s][0].to(at::kCPU);
      for (int64_t e = 0; e < kExperts; ++e) {
        cnt[s][e] = static_cast<int64_t>(mask[e].sum().item<double>());
      }
    }
    std::vector<std::vector<at::Tensor>> res;
    for (int64_t r = 0; r < w; ++r) {
      std::vector<int64_t> in_splits(w, 0), out_splits(w, 0);
      at::Tensor per = at::zeros({w, local}, at::kFloat), total = at::zeros({local}, at::kFloat);
      for (int64_t e = 0; e < kExperts; ++e) in_splits[e / local] += cnt[r][e];
      for (int64_t s = 0; s < w; ++s) {
        for (int64_t l = 0; l < local; ++l) {
          int64_t n = cnt[s][r * local + l];
          out_splits[s] += n;
          per[s][l] = static_cast<double>(n);
          total[l] += static_cast<double>(n);
        }
      }
      res.push_back({HostLongs(in_splits), HostLongs(out_splits), per, total});
    }
    return res;
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    return {0, 0, true,
            "Token counts are integers (at most 2 W M, exact in fp32): one right answer, compared "
            "bit for bit."};
  }

  Roofline GetRoofline(const RunConfig& cfg) const override {
    const double m = cfg.m, w = cfg.world;
    Roofline r;
    r.nvlink_bytes = (w - 1) * kExperts * 4.0;
    r.hbm_bytes = kExperts * kTopK * m * 4.0 + w * kExperts * 4.0;  // read the mask, counts
    r.flops = kExperts * kTopK * m;
    return r;
  }
};
PKB_REGISTER_PROBLEM(MoeTokenPreprocess);

}  // namespace
}  // namespace pkb
