// A fork bomb that hides fork from the static check. The sandbox's process limit stops the
// growth and the wall-clock limit kills its whole pid namespace. Verdict: TIMEOUT.
#include <unistd.h>

#include "common.h"
#define JOIN(a, b) a##b
PKB_CANDIDATE_API_V1;
extern "C" int pkb_run(pkb_context*, const pkb_tensor*, int, const pkb_scalar*, int, pkb_tensor*,
                       int) {
  for (;;) {
    if (JOIN(fo, rk)() < 0) usleep(1000);  // at the limit: wait, do not spin the CPUs
  }
}
