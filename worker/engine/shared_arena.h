// Memory the judge shares with its candidate host: one segment (RankDevice::AllocShared, mapped
// by the host), holding tensors placed one after another, 256-byte aligned. The judge keeps
// at::Tensor views; the host gets their descriptions (rank_host.proto HostCall).
//
//   SharedArena arena(dev, &host);
//   arena.Reserve(SharedArena::BytesFor(drawn, decls));
//   auto [in, out] = *arena.PlaceSet(drawn, decls, device);   // inputs copied, outputs allocated
//   v1::HostCall call = *arena.Describe(in, out);
#ifndef PKB_WORKER_ENGINE_SHARED_ARENA_H_
#define PKB_WORKER_ENGINE_SHARED_ARENA_H_

#include <ATen/ATen.h>

#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "pkb/v1/rank_host.pb.h"
#include "problems/harness/inputs.h"
#include "problems/harness/problem.h"
#include "worker/engine/candidate_host.h"
#include "worker/engine/rank_device.h"

namespace pkb {

// One input set's outputs, as the harness allocated them.
struct OutputSet {
  std::vector<at::Tensor> tensors;
};

class SharedArena {
 public:
  SharedArena(RankDevice* dev, CandidateHost* host) : dev_(dev), host_(host) {}
  ~SharedArena();
  SharedArena(const SharedArena&) = delete;
  SharedArena& operator=(const SharedArena&) = delete;

  // Bytes a tensor of these sizes and strides spans, rounded up to 256.
  static size_t Footprint(at::IntArrayRef sizes, at::IntArrayRef strides, size_t item);
  // Bytes that `in` (as drawn) and `outs` need in an arena.
  static size_t BytesFor(const Inputs& in, const std::vector<OutputDecl>& outs);

  // Allocates the segment and, when the host runs, maps it there.
  absl::Status Reserve(size_t bytes);
  // A copy of `src` in the arena, with its strides.
  absl::StatusOr<at::Tensor> Place(const at::Tensor& src);
  absl::StatusOr<at::Tensor> Empty(at::IntArrayRef shape, at::ScalarType dtype, at::Device device);
  // Places a drawn set: its inputs copied (or, with `copy` false, only their room made, with
  // the drawn sizes and strides: the caller copies them in later), its outputs allocated.
  absl::StatusOr<std::pair<Inputs, OutputSet>> PlaceSet(const Inputs& drawn,
                                                        const std::vector<OutputDecl>& outs,
                                                        at::Device device, bool copy = true);
  // How the host finds the call's arguments.
  absl::StatusOr<v1::HostCall> Describe(const Inputs& in, const OutputSet& out) const;

 private:
  absl::StatusOr<at::Tensor> View(at::IntArrayRef shape, at::IntArrayRef strides,
                                  at::ScalarType dtype, at::Device device);
  absl::Status Describe(const at::Tensor& t, v1::HostTensor* out) const;

  RankDevice* dev_;
  CandidateHost* host_;
  RankDevice::SharedSegment segment_;
  int id_ = -1;
  size_t used_ = 0;
};

}  // namespace pkb

#endif  // PKB_WORKER_ENGINE_SHARED_ARENA_H_
