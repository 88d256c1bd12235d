// Plants a FIFO where its judge's report belongs, then kills its judge (the process that started
// this one), so that the judge never writes the report over it. An engine that opened the report
// files with a plain open would block on the FIFO for good, holding the node until the worker's
// limit. The engine reads only regular files and never blocks: the rank died, the verdict is
// RUNTIME_ERROR at once. The FIFO is checked to have landed and the kill to have been allowed,
// so that an attempt that is broken fails the entry (an OK verdict) instead of passing it.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "common.h"
#include "judge_paths.h"
#define JOIN(a, b) a##b
PKB_CANDIDATE_API_V1;

extern "C" int pkb_run(pkb_context* ctx, const pkb_tensor* in, int, const pkb_scalar*, int,
                       pkb_tensor* out, int) {
  if (ctx->rank == ctx->world_size - 1) {
    const std::string report = JudgeReportPath();
    if (!report.empty()) {
      const std::string mine = report + "." + std::to_string(ctx->rank);
      struct stat st;
      if (JOIN(mkf, ifo)(mine.c_str(), 0644) == 0 && lstat(mine.c_str(), &st) == 0 &&
          S_ISFIFO(st.st_mode)) {
        JOIN(ki, ll)(getppid(), SIGKILL);
      }
    }
  }
  // Only reached where the FIFO or the kill failed: honest outputs, so the entry's OK shows it.
  return allreduce_bf16(ctx, static_cast<const uint16_t*>(in[0].data),
                        static_cast<uint16_t*>(out[0].data), pkb_numel(&in[0]), false);
}
