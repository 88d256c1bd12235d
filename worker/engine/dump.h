// Writing a problem's per-rank inputs and expected outputs to .pt files that stock torch.load
// reads, for comparison outside the service, e.g. with the public PKB scripts.
#ifndef PKB_WORKER_ENGINE_DUMP_H_
#define PKB_WORKER_ENGINE_DUMP_H_

#include <string>

#include "absl/status/status.h"
#include "worker/engine/engine.h"

namespace pkb {

// For input set 0 (PKB's trial 0) unless o.set_offset says otherwise: rank<r>.input.<name>.pt
// and rank<r>.expected.<i>.pt (the single-process oracle), and manifest.json describing them.
// Inputs are drawn on the GPU when this build has one, as PKB draws them; otherwise on the CPU
// (values then differ from PKB's).
//
// Each file holds one tensor, written with torch::pickle_save. Stock torch.load has no storage
// class for the float8 dtypes (nor for uint16/32/64), so such a tensor is written as its bits
// in the integer dtype of its width (float8: uint8), same shape; manifest.json gives every
// file's dtype and `stored_as`, and Python turns it back exactly:
//
//   t = torch.load(path)
//   if entry["stored_as"] != entry["dtype"]: t = t.view(getattr(torch, entry["dtype"]))
//
// The manifest also lists each rank's scalar arguments (`max_k`, `eps`, ...).
absl::Status DumpProblem(const EvalOptions& o, const std::string& dir);

}  // namespace pkb

#endif  // PKB_WORKER_ENGINE_DUMP_H_
