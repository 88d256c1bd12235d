// Plants a file outside its scratch folder (a later job, or the worker, might read it).
// Verdict: REJECTED by the static check [files, proc-sys].
#include <pkb/candidate.h>
#include <cstdio>
PKB_CANDIDATE_API_V1;
extern "C" int pkb_run(pkb_context*, const pkb_tensor*, int, const pkb_scalar*, int, pkb_tensor*,
                       int) {
  if (FILE* f = fopen("/etc/ld.so.preload", "w")) fclose(f);
  return 0;
}
