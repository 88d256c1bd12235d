// Declares a function of the rank process (it is linked with exported symbols) to overwrite
// the verdict it reports. Verdict: REJECTED by the static check [harness-internals].
#include <pkb/candidate.h>
namespace pkb {
void MarkTrialCorrect(int trial);
}
PKB_CANDIDATE_API_V1;
extern "C" int pkb_run(pkb_context*, const pkb_tensor*, int, const pkb_scalar*, int, pkb_tensor*,
                       int) {
  pkb::MarkTrialCorrect(0);
  return 0;
}
