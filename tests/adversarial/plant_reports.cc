// Plants things where the judges' report files belong (the scratch folder is the submission's to
// write; the report's path is on the judge's command line): at its first call each rank's host
// puts a FIFO, a link and an unsigned forgery at every rank's report path, the files the engine
// reads as soon as they are all there to give the verdict before the ranks' exit. Each judge
// writes its report into a fresh file and renames it into place, which replaces what was planted
// without opening or following it; the engine reads only regular files without blocking, and a
// forgery it finds first only makes it wait. Each plant is checked to have landed, so an attempt
// that is broken fails the entry instead of passing it. Verdict: OK, the honest outputs' own.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "common.h"
#include "judge_paths.h"
#define JOIN(a, b) a##b
PKB_CANDIDATE_API_V1;

namespace {

// Something where `path` is, unless a judge's report is there already (a regular file this
// host did not write); true when it stands there afterwards.
bool Plant(const std::string& path, int how) {
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) return true;  // a peer planted first, or a judge wrote
  if (how == 0) return JOIN(mkf, ifo)(path.c_str(), 0644) == 0 || lstat(path.c_str(), &st) == 0;
  if (how == 1) {  // a link to nowhere (to the key, gone by now)
    const std::string key = path.substr(0, path.rfind('.')) + ".key.0";
    return JOIN(sym, link)(key.c_str(), path.c_str()) == 0 || lstat(path.c_str(), &st) == 0;
  }
  int fd = JOIN(op, en)(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0) return lstat(path.c_str(), &st) == 0;
  const char forged[] = "an unsigned report that says OK";
  bool ok = JOIN(wri, te)(fd, forged, sizeof forged) == ssize_t(sizeof forged);
  close(fd);
  return ok;
}

}  // namespace

extern "C" int pkb_run(pkb_context* ctx, const pkb_tensor* in, int, const pkb_scalar*, int,
                       pkb_tensor* out, int) {
  static bool planted = false;
  if (!planted) {
    planted = true;
    const std::string report = JudgeReportPath();
    if (report.empty()) {
      ctx->set_error(ctx, "control failed: the judge's command line");
      return 1;
    }
    for (int r = 0; r < ctx->world_size; ++r) {
      if (!Plant(report + "." + std::to_string(r), (r + ctx->rank) % 3)) {
        ctx->set_error(ctx, "control failed: could not plant at a report path");
        return 1;
      }
    }
  }
  return allreduce_bf16(ctx, static_cast<const uint16_t*>(in[0].data),
                        static_cast<uint16_t*>(out[0].data), pkb_numel(&in[0]), false);
}
