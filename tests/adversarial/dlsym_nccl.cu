// Looks up NCCL's all-reduce at run time to wrap it (and skip the real work when timed).
// Verdict: REJECTED by the static check [dynamic-loading].
#include <pkb/candidate.h>
#include <dlfcn.h>
PKB_CANDIDATE_API_V1;
extern "C" int pkb_run(pkb_context*, const pkb_tensor*, int, const pkb_scalar*, int, pkb_tensor*,
                       int) {
  void* f = dlsym(RTLD_DEFAULT, "ncclAllReduce");
  return f ? 0 : 1;
}
