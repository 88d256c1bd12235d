// Looks for the secret seed and the worker's token in the environment.
// Verdict: REJECTED by the static check [environment].
#include <pkb/candidate.h>
#include <cstdlib>
PKB_CANDIDATE_API_V1;
extern "C" int pkb_run(pkb_context*, const pkb_tensor*, int, const pkb_scalar*, int, pkb_tensor*,
                       int) {
  const char* seed = getenv("PKB_SET_OFFSET");
  const char* token = getenv("PKB_TOKEN");
  return seed || token ? 0 : 1;
}
