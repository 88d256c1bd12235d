// SettleNodeBaseline (engine.h): the reference timed again in fresh processes until the node's
// baseline has settled.
#include "absl/strings/str_cat.h"
#include "pkb/v1/result.pb.h"
#include "worker/engine/engine.h"

namespace pkb {

int SettleNodeBaseline(const EvalOptions& job, int runs, std::string* failure) {
  EvalOptions b = job;
  b.baseline = true;
  b.baseline_only = true;
  b.compile_only = false;
  b.settle_baseline = 0;
  b.standby = nullptr;
  b.source.clear();
  b.job_key.clear();
  b.keep_scratch = false;
  // Timed while the job's own word holds (the worker's compiles stay stopped to its verdict).
  b.quiet_from.clear();
  int ok = 0;
  for (int i = 0; i < runs; ++i) {
    v1::EvalResult r = RunEvaluation(b, EvalEventCallback());
    if (r.status() == v1::OK && r.compiles_beside() == 0) {
      ++ok;
      continue;
    }
    if (failure != nullptr && failure->empty()) {
      *failure = r.status() == v1::OK
                     ? absl::StrCat(r.compiles_beside(),
                                    " compile(s) ran on the node beside a settling run (not "
                                    "stopped: another worker's, or one started by hand): it did "
                                    "not join the node's baseline")
                     : absl::StrCat(v1::Status_Name(r.status()), ": ", r.message());
    }
    // What failed once fails again, and a node that compiles beside one run will beside the
    // next: the job goes on with the baseline it has, and a later one settles it.
    break;
  }
  return ok;
}

}  // namespace pkb
