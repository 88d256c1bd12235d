// A timed round's input sets (Judge::PlaceRound, judge_runner.h): drawn for the round, placed in
// the arena the host maps (the last round's room where every set has its slots), and their
// landing staged: the copies in and the outputs' poison as one launch of the judge's byte moves.
#include <memory>
#include <utility>
#include <vector>

#include "problems/harness/check.h"
#include "problems/harness/inputs.h"
#include "worker/engine/judge_runner.h"

namespace pkb {

std::vector<OutputDecl> Judge::DeclsOf(int round, int sets, int s) const {
  return p_.OutputsOfSet(cfg_, comm_->rank(), SetNumber(round, sets, s));
}

namespace {

// Whether a drawn set and its outputs have exactly the slots of a placed one: the same tensors
// (names, sizes, strides, dtypes) and outputs.
bool SameSlots(const Inputs& drawn, const std::vector<OutputDecl>& decls, const Inputs& in,
               const OutputSet& out) {
  if (drawn.names != in.names || drawn.tensors.size() != in.tensors.size() ||
      decls.size() != out.tensors.size())
    return false;
  for (size_t k = 0; k < in.tensors.size(); ++k) {
    const at::Tensor &a = drawn.tensors[k], &b = in.tensors[k];
    if (a.sizes() != b.sizes() || a.strides() != b.strides() || a.scalar_type() != b.scalar_type())
      return false;
  }
  for (size_t k = 0; k < decls.size(); ++k) {
    if (out.tensors[k].sizes() != at::IntArrayRef(decls[k].shape) ||
        out.tensors[k].scalar_type() != decls[k].dtype)
      return false;
  }
  return true;
}

}  // namespace

absl::Status Judge::PlaceRound(int round, int sets, TimedRound* placed) {
  placed->land.reset();  // staged on the last round's draws
  placed->refill.reset();
  placed->drawn.clear();  // the last round's, compared already: their memory serves the new ones
  std::vector<Inputs> drawn;
  std::vector<std::vector<OutputDecl>> decls;
  for (int s = 0; s < sets; ++s) {
    drawn.push_back(DrawInputs(p_, cfg_, comm_->rank(), SetNumber(round, sets, s)));
    decls.push_back(DeclsOf(round, sets, s));
  }
  // Sets of the same sizes as the round before (every problem's but those whose sizes depend on
  // the draw) keep its room: the arena and the host's mapping stay.
  bool same = placed->arena && static_cast<int>(placed->inputs.size()) == sets;
  for (int s = 0; s < sets && same; ++s)
    same = SameSlots(drawn[s], decls[s], placed->inputs[s], placed->outputs[s]);
  if (same) {
    for (int s = 0; s < sets; ++s) placed->inputs[s].scalars = drawn[s].scalars;
    placed->drawn = std::move(drawn);
    return StageLanding(dev_, placed);
  }
  placed->inputs.clear();
  placed->outputs.clear();
  placed->drawn.clear();
  placed->arena.reset();
  size_t bytes = 0;
  for (int s = 0; s < sets; ++s) bytes += SharedArena::BytesFor(drawn[s], decls[s]);
  placed->arena = std::make_unique<SharedArena>(dev_, host_);
  PKB_RETURN_IF_ERROR(placed->arena->Reserve(bytes));
  for (int s = 0; s < sets; ++s) {
    PKB_ASSIGN_OR_RETURN(auto set,
                         placed->arena->PlaceSet(drawn[s], decls[s], cfg_.device, /*copy=*/false));
    placed->inputs.push_back(std::move(set.first));
    placed->outputs.push_back(std::move(set.second));
  }
  placed->drawn = std::move(drawn);
  return StageLanding(dev_, placed);
}

// One launch of the judge's own kernel, not an ATen op per tensor (about 4 us of the judge's
// thread each, thousands a round). ATen's multi-tensor ops (at::_foreach_copy_, and
// _foreach_zero_/_add_ for the poison) were tried first: on the H100 (2026-12-06) they waited on
// something the judge's GPU watch, running beside them, never let finish, so every watch ran out
// its 60 s limit. Not traced; a kernel module loaded lazily at its first launch, which waits for
// the whole device, would do it: the byte moves' kernel is loaded when they are staged.
absl::Status StageLanding(RankDevice* dev, TimedRound* round) {
  round->land.reset();
  round->refill.reset();
  round->loose_inputs.clear();
  round->loose_outputs.clear();
  std::vector<ByteMove> copies, poison;
  for (size_t s = 0; s < round->drawn.size(); ++s) {
    for (size_t k = 0; k < round->drawn[s].tensors.size(); ++k) {
      const at::Tensor& from = round->drawn[s].tensors[k];
      const at::Tensor& to = round->inputs[s].tensors[k];
      // Bytes as they lie: not a conjugate or negative view (copy_ resolves those), on the
      // device whose stream runs the moves.
      if (from.is_contiguous() && to.is_contiguous() && !from.is_conj() && !from.is_neg() &&
          from.device() == dev->device() && to.device() == dev->device() &&
          from.scalar_type() == to.scalar_type() && from.nbytes() == to.nbytes()) {
        copies.push_back({to.data_ptr(), from.data_ptr(), to.nbytes()});
      } else {
        round->loose_inputs.emplace_back(static_cast<int>(s), static_cast<int>(k));
      }
    }
  }
  for (size_t s = 0; s < round->outputs.size(); ++s) {
    for (size_t k = 0; k < round->outputs[s].tensors.size(); ++k) {
      const at::Tensor& t = round->outputs[s].tensors[k];
      if (t.is_contiguous()) {
        const PoisonFill fill = PoisonPattern(t.scalar_type(), 1);
        poison.push_back({t.data_ptr(), nullptr, t.nbytes(), fill.bits, fill.bytes});
      } else {
        round->loose_outputs.emplace_back(static_cast<int>(s), static_cast<int>(k));
      }
    }
  }
  PKB_ASSIGN_OR_RETURN(round->refill, dev->StageMoves(copies));
  copies.insert(copies.end(), poison.begin(), poison.end());
  PKB_ASSIGN_OR_RETURN(round->land, dev->StageMoves(copies));
  return absl::OkStatus();
}

absl::Status FillRound(TimedRound* round, bool poison) {
  if (!round->land || !round->refill)
    return absl::InternalError("the round's landing is not staged");
  PKB_RETURN_IF_ERROR(poison ? round->land->Run() : round->refill->Run());
  for (const auto& [s, k] : round->loose_inputs)
    round->inputs[s].tensors[k].copy_(round->drawn[s].tensors[k]);
  if (poison) {
    for (const auto& [s, k] : round->loose_outputs) Poison(round->outputs[s].tensors[k], 1);
  }
  return absl::OkStatus();
}

}  // namespace pkb
