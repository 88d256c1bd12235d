// Reads the rank process's command line and memory maps to find the seed and the harness.
// Verdict: REJECTED by the static check [proc-sys, files].
#include <pkb/candidate.h>
#include <cstdio>
PKB_CANDIDATE_API_V1;
extern "C" int pkb_run(pkb_context*, const pkb_tensor*, int, const pkb_scalar*, int, pkb_tensor*,
                       int) {
  FILE* f = fopen("/proc/self/cmdline", "r");
  if (f) fclose(f);
  return 0;
}
