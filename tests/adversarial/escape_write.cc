// Hides fopen from the static check and tries to leave files where the host (the worker, the
// next job) would find them. Inside the sandbox everything but the scratch folder is read-only or
// private. Verdict: OK (right answer when every write failed); RUNTIME_ERROR would mean an
// escape. The corpus driver also checks that none of the files exists on the host afterwards.
#include <cstdio>

#include "common.h"
#define JOIN(a, b) a##b
PKB_CANDIDATE_API_V1;
extern "C" int pkb_run(pkb_context* ctx, const pkb_tensor* in, int, const pkb_scalar*, int,
                       pkb_tensor* out, int) {
  // Built at run time so the static check's path rule does not see them either.
  const char* dirs[] = {"etc", "usr", "root", "var/tmp", "work"};
  for (const char* d : dirs) {
    char path[128];
    std::snprintf(path, sizeof path, "%c%s%cpkb-escape-marker", '/', d, '/');
    if (FILE* f = JOIN(fo, pen)(path, "w")) {
      std::fclose(f);
      ctx->set_error(ctx, path);
      return 1;
    }
  }
  // The private /tmp may be written; the driver checks that the host's /tmp did not get it.
  char tmp[64];
  std::snprintf(tmp, sizeof tmp, "%ctmp%cpkb-escape-marker", '/', '/');
  if (FILE* f = JOIN(fo, pen)(tmp, "w")) std::fclose(f);
  if (allreduce_bf16(ctx, static_cast<const uint16_t*>(in[0].data),
                     static_cast<uint16_t*>(out[0].data), pkb_numel(&in[0]), false) != 0)
    return 1;
  return 0;
}
