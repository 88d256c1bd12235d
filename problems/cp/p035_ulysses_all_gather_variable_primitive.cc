// Problem 35 — the Ulysses all-gather for tensors whose sizes may differ per rank: exchange the
// shapes first (a small collective and a host read), then gather and concatenate.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

constexpr int64_t kGatherDim = 0;

class UlyssesAllGatherVariable : public Problem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        35,
        "35_ulysses_all_gather_variable_primitive",
        1,
        "VeOmni / verl Ulysses sequence parallel: all_gather of tensors that may differ in size",
        "context parallel",
        R"md(All-gather over WORLD of tensors whose sizes may differ per rank, concatenated along
`gather_dim` = 0. Any W.

- Inputs per rank r (on the device): `x` (M, N)
  run dtype, randn, different on every rank; int scalar `gather_dim` = 0.
- Computation (PKB's reference): (1) all-gather every rank's shape (2 int64 values)
  and read them back to the host (a device sync); (2) allocate one buffer per source
  rank of that shape; (3) all-gather x into them (list form); (4) concatenate along
  dim 0. At W = 1 the result is x.
- Output on every rank: `out` (W M, N) run dtype, identical on all ranks: rows
  [s M, (s+1) M) are rank s's x. In this problem every rank's x is (M, N), so the
  output shape is fixed by the run's M, N and W; the harness allocates it before the
  call (the candidate does not choose it).
- A candidate may keep the shape exchange or skip it. Host synchronizations and
  shape exchanges inside the call are legal; they are part of the timed work, as in
  the reference, which pays for the extra collective and the host read.
- Tolerance: bit-exact. Every output element is a copy of one input element, so a
  correct kernel reproduces its bits.
- Traffic: (W-1) M N b bytes received per rank plus 16 (W-1) bytes of shapes;
  nccl-tests allgather with S = W M N b, busbw factor (W-1)/W. FLOPs: 0.)md"};
    return i;
  }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    return RequirePositiveShape(cfg);
  }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    Inputs in;
    in.Add("x", at::randn({cfg.m, cfg.n}, Opts(cfg)));
    in.scalars.push_back(ScalarArg::Int("gather_dim", kGatherDim));
    return in;
  }

  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    return {{"out", {cfg.world * cfg.m, cfg.n}, cfg.dtype}};
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    at::Tensor x = in[0].contiguous();
    const int64_t w = comm.size();
    if (w == 1) return std::vector<at::Tensor>{x.clone()};
    // The shape exchange and its host read, as PKB's reference pays for them.
    at::Tensor shape = at::tensor(x.sizes(), at::TensorOptions().dtype(at::kLong)).to(x.device());
    at::Tensor shapes = at::empty({w * x.dim()}, shape.options());
    PKB_RETURN_IF_ERROR(comm.AllGatherInto(shapes, shape));
    at::Tensor host = shapes.to(at::kCPU).view({w, x.dim()});
    for (int64_t s = 0; s < w; ++s) {
      at::Tensor other = host[s];
      if (!at::equal(other, host[0])) {
        // torch's all_gather takes its uneven path (grouped broadcasts) here; this problem's
        // inputs never need it.
        return absl::InvalidArgumentError(
            absl::StrCat("rank ", s, "'s x has shape [", absl::StrJoin(ToLongs(other), ", "),
                         "], unlike rank 0's [", absl::StrJoin(ToLongs(host[0]), ", "),
                         "]: this problem's inputs are all (M, N)"));
      }
    }
    // Equal shapes: torch's all_gather gathers into one flat buffer; the blocks are then
    // concatenated along gather_dim as PKB's torch.cat does.
    at::Tensor flat = at::empty({w * x.numel()}, x.options());
    PKB_RETURN_IF_ERROR(comm.AllGatherInto(flat, x.reshape({-1})));
    std::vector<at::Tensor> blocks;
    for (const at::Tensor& b : flat.chunk(w, 0)) blocks.push_back(b.view(x.sizes()));
    return std::vector<at::Tensor>{at::cat(blocks, kGatherDim)};
  }

  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    std::vector<at::Tensor> xs;
    for (const Inputs& in : all) xs.push_back(in[0]);
    at::Tensor out = at::cat(xs, kGatherDim);
    return std::vector<std::vector<at::Tensor>>(all.size(), {out});
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    return {0, 0, true,
            "Every element is a copy of one input element (no arithmetic), so a correct kernel "
            "reproduces its bits: bit-exact."};
  }

  Roofline GetRoofline(const RunConfig& cfg) const override {
    const double s = cfg.m * cfg.n * ElementBytes(cfg.dtype);
    Roofline r;
    r.nvlink_bytes = (cfg.world - 1) * (s + 16);
    r.hbm_bytes = s + cfg.world * s;  // read x, write every block
    r.flops = 0;
    r.collective_bytes = cfg.world * s;
    r.busbw_factor = AllGatherFactor(cfg.world);
    return r;
  }

 private:
  static std::vector<int64_t> ToLongs(const at::Tensor& t) {
    at::Tensor c = t.contiguous();
    return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
  }
};
PKB_REGISTER_PROBLEM(UlyssesAllGatherVariable);

}  // namespace
}  // namespace pkb
