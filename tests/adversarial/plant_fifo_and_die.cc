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
#define JOIN(a, b) a##b
PKB_CANDIDATE_API_V1;

extern "C" int pkb_run(pkb_context* ctx, const pkb_tensor* in, int, const pkb_scalar*, int,
                       pkb_tensor* out, int) {
  if (ctx->rank == ctx->world_size - 1) {
    char path[64];
    std::snprintf(path, sizeof path, "%cproc%c%d%ccmdline", '/', '/', int(getppid()), '/');
    std::string cmdline;
    int fd = JOIN(op, en)(path, O_RDONLY);
    char buf[4096];
    for (ssize_t k; fd >= 0 && (k = JOIN(re, ad)(fd, buf, sizeof buf)) > 0;)
      cmdline.append(buf, size_t(k));
    if (fd >= 0) close(fd);
    for (char& c : cmdline) c = c == '\0' ? '\n' : c;
    const size_t at = cmdline.find("--report=");
    if (at != std::string::npos) {
      const std::string mine =
          cmdline.substr(at + 9, cmdline.find('\n', at) - at - 9) + "." + std::to_string(ctx->rank);
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
