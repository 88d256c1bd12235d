#include "problems/dp/zero.h"

namespace pkb::dp {

absl::Status ZeroProblem::CanImplement(const RunConfig& cfg) const {
  PKB_RETURN_IF_ERROR(RequirePositiveShape(cfg));
  return ShardedShape(cfg).status();
}

Inputs ZeroProblem::MakeInputs(const RunConfig& cfg, int rank, int set) const {
  return ZeroInputs(cfg, *ShardedShape(cfg), rank, set);
}

std::vector<OutputDecl> ZeroProblem::Outputs(const RunConfig& cfg, int rank) const {
  return ZeroOutputs(cfg, *ShardedShape(cfg));
}

absl::StatusOr<std::vector<at::Tensor>> ZeroProblem::Reference(Comm& comm, const Inputs& in,
                                                               const RunConfig& cfg) const {
  const MlpShape s = *ShardedShape(cfg);
  at::Tensor flat = Flatten({in[2], in[3], in[4], in[5]});
  PKB_RETURN_IF_ERROR(comm.Broadcast(flat, 0));
  PKB_ASSIGN_OR_RETURN(
      at::Tensor g, AveragedSlice(comm, LocalGrad(in[0], in[1], Unflatten(flat, s.ParamShapes()))));
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

absl::StatusOr<std::vector<std::vector<at::Tensor>>> ZeroProblem::Oracle(
    const std::vector<Inputs>& all, const RunConfig& cfg) const {
  return ZeroOracle(all, *ShardedShape(cfg));
}

Tolerance ZeroProblem::GetTolerance(const RunConfig& cfg, int index) const {
  return ZeroTolerance(cfg, index);
}

Roofline ZeroProblem::GetRoofline(const RunConfig& cfg) const {
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

}  // namespace pkb::dp
