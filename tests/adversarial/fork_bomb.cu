// A fork bomb. Verdict: REJECTED by the static check [processes].
#include <pkb/candidate.h>
#include <unistd.h>
PKB_CANDIDATE_API_V1;
extern "C" int pkb_run(pkb_context*, const pkb_tensor*, int, const pkb_scalar*, int, pkb_tensor*,
                       int) {
  for (;;) fork();
}
