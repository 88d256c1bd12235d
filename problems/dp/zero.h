// What problems 41 (ZeRO-1) and 42 (ZeRO-2) share: the inputs, the step on this rank's slice of
// the flat parameters, the all-gather back, the oracle and the tolerances. They differ only in
// how the averaged gradient slice is made (all-reduce then slice, or reduce-scatter).
#ifndef PKB_PROBLEMS_DP_ZERO_H_
#define PKB_PROBLEMS_DP_ZERO_H_

#include "problems/dp/adam.h"

namespace pkb::dp {

class ZeroProblem : public Problem {
 public:
  // This rank's slice of the flat gradient summed over WORLD and divided by W.
  virtual absl::StatusOr<at::Tensor> AveragedSlice(Comm& comm, at::Tensor grad) const = 0;
  // The bus-bandwidth factor of that reduction.
  virtual double ReduceFactor(int world) const = 0;

  // PKB draws every rank's inputs from the shared seed 42 + 1000 id + 1000003 set (rank 0's).
  uint64_t Seed(int rank, int set) const override { return Problem::Seed(0, set); }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    PKB_RETURN_IF_ERROR(RequirePositiveShape(cfg));
    return ShardedShape(cfg).status();
  }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    return ZeroInputs(cfg, *ShardedShape(cfg), rank, set);
  }

  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    return ZeroOutputs(cfg, *ShardedShape(cfg));
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    const MlpShape s = *ShardedShape(cfg);
    at::Tensor flat = Flatten({in[2], in[3], in[4], in[5]});
    PKB_RETURN_IF_ERROR(comm.Broadcast(flat, 0));
    PKB_ASSIGN_OR_RETURN(at::Tensor g,
                         AveragedSlice(comm, LocalGrad(in[0], in[1],
                                                       Unflatten(flat, s.ParamShapes()))));
    const int64_t part = s.numel() / comm.size();
    at::Tensor w = flat.narrow(0, comm.rank() * part, part).clone();
    at::Tensor m = in[6].clone(), v = in[7].clone();
    AdamUpdate(w, m, v, g, ReadHyper(in));
    at::Tensor gathered = at::empty({s.numel()}, w.options());
    PKB_RETURN_IF_ERROR(comm.AllGatherInto(gathered, w));
    std::vector<at::Tensor> out = Unflatten(gathered, s.ParamShapes());
    out.push_back(m);
    out.push_back(v);
    return out;
  }

  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    return ZeroOracle(all, *ShardedShape(cfg));
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    return ZeroTolerance(cfg, index);
  }

  // From zero moments the step is lr * sign(g): the averaged gradient without one rank mostly
  // keeps its sign, so the parameters cannot show a missing rank; the moment shards carry it.
  bool RankMissingDetectable(const RunConfig& cfg, int set, int index) const override {
    return index >= 4;
  }

  Roofline GetRoofline(const RunConfig& cfg) const override {
    const MlpShape s = *ShardedShape(cfg);
    const double b = ElementBytes(cfg.dtype), p = double(s.numel()), part = p / cfg.world;
    Roofline r;
    r.nvlink_bytes = p * b + ReduceFactor(cfg.world) * p * b + AllGatherFactor(cfg.world) * p * b;
    // read X, y, the parameters, the gradient slice and the moment shards; write the gradient,
    // the moment shards and the gathered parameters
    r.hbm_bytes = (s.chunk * (s.d_in + s.d_out) + p + p + 5 * part + p) * b;
    r.flops = MlpFlops(s) + 12 * part;
    r.collective_bytes = p * b;
    r.busbw_factor = ReduceFactor(cfg.world);
    return r;
  }
};

}  // namespace pkb::dp

#endif  // PKB_PROBLEMS_DP_ZERO_H_
