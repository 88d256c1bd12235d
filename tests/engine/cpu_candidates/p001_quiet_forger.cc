// Problem 1 on CPU, correct, and in pkb_init writes a would-be word to time ("go", an empty
// line, a guessed one) into every pipe it can open as some process's stdin (/proc/<pid>/fd/0),
// as an agent would to have the judges time before the worker's compiles are stopped. Reaching
// any fails pkb_init (so RUNTIME_ERROR): expected verdict OK, since the sandbox keeps the judge's,
// mpirun's and bwrap's descriptors out of reach (EACCES); the judge would pass over such lines
// anyway (common/quiet_word_test.cc). engine_e2e_test, "[quiet]".
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

#include "common.h"
#define JOIN(a, b) a##b
PKB_CANDIDATE_API_V1;

extern "C" int pkb_init(pkb_context*) {
  char root[8];
  std::snprintf(root, sizeof root, "%cproc", '/');
  DIR* d = JOIN(open, dir)(root);
  int reached = 0;
  for (dirent* e; d != nullptr && (e = JOIN(read, dir)(d)) != nullptr;) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char path[64];
    std::snprintf(path, sizeof path, "%s%c%s%cfd%c0", root, '/', e->d_name, '/', '/');
    const int fd = JOIN(op, en)(path, O_WRONLY | O_NONBLOCK);
    if (fd < 0) continue;
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode)) {
      const char forged[] = "go\n\ngo 0000\n";
      if (JOIN(wri, te)(fd, forged, sizeof forged - 1) > 0) ++reached;
    }
    close(fd);
  }
  if (d != nullptr) JOIN(close, dir)(d);
  std::fprintf(stderr, "quiet forger: wrote to %d stdin pipe(s)\n", reached);
  return reached == 0 ? 0 : 1;
}

extern "C" int pkb_run(pkb_context* ctx, const pkb_tensor* in, int, const pkb_scalar*, int,
                       pkb_tensor* out, int) {
  if (allreduce_bf16(ctx, static_cast<const uint16_t*>(in[0].data),
                     static_cast<uint16_t*>(out[0].data), pkb_numel(&in[0]), false) != 0)
    return 1;
  return 0;
}
