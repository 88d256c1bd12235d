// Writing a problem's per-rank inputs and expected outputs to .pt files (torch.load reads them)
// for comparison outside the service, e.g. with the public PKB scripts.
#ifndef PKB_WORKER_ENGINE_DUMP_H_
#define PKB_WORKER_ENGINE_DUMP_H_

#include <string>

#include "absl/status/status.h"
#include "worker/engine/engine.h"

namespace pkb {

// For input set 0 (PKB's trial 0) unless o.set_offset says otherwise: rank<r>.input.<name>.pt
// and rank<r>.expected.<i>.pt (the single-process oracle). Inputs are drawn on the GPU when this
// build has one, as PKB draws them; otherwise on the CPU (values then differ from PKB's).
absl::Status DumpProblem(const EvalOptions& o, const std::string& dir);

}  // namespace pkb

#endif  // PKB_WORKER_ENGINE_DUMP_H_
