// Writes lines on stdout that look like the harness's progress channel: a trial number of the
// wrong type, one out of range, an announcement of success for every trial, and 1 MiB without
// a line end. The engine parses rank 0's stdout as untrusted (worker/engine/verdict.h): these
// lines are dropped or logged, the verdict comes from the reports, and the engine neither dies
// nor grows without bound. Verdict: OK (it computes the right answer); before the verdict
// module, the first line threw inside the engine and the job ended INTERNAL.
#include <cstdio>
#include <string>

#include "common.h"
PKB_CANDIDATE_API_V1;
extern "C" int pkb_run(pkb_context* ctx, const pkb_tensor* in, int, const pkb_scalar*, int,
                       pkb_tensor* out, int) {
  static bool said = false;
  if (!said) {
    said = true;
    std::printf("PKB-PROGRESS {\"trial\": \"zero\", \"ok\": true}\n");
    std::printf("PKB-PROGRESS {\"trial\": 1e300}\n");
    std::printf("PKB-PROGRESS {\"trial\": -5, \"ok\": true}\n");
    for (int t = 0; t < 64; ++t) std::printf("PKB-PROGRESS {\"trial\": %d, \"ok\": true}\n", t);
    std::printf("PKB-PROGRESS [1, 2, 3]\nPKB-PROGRESS {\"stage\": 7}\n");
    std::string endless(1 << 20, 'x');
    std::fputs(endless.c_str(), stdout);
    std::fflush(stdout);
  }
  if (allreduce_bf16(ctx, static_cast<const uint16_t*>(in[0].data),
                     static_cast<uint16_t*>(out[0].data), pkb_numel(&in[0]), false) != 0)
    return 1;
  return 0;
}
