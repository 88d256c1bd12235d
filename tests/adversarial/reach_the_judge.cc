// Tries to reach what the judge of its rank holds (the judge is the process that started the
// candidate's and runs the reference, the comparison and the report): the report keys the engine
// handed the judges (files beside the report, whose path is on the judge's command line), and the
// judge's memory (/proc/<judge>/mem, process_vm_readv, ptrace). Each way in is first tried where
// it must work (the judge's command line; this process's own memory), so an attempt that is
// broken fails the entry instead of passing it. Reaching anything of the judge ends the run with
// the reason (RUNTIME_ERROR); otherwise the outputs are honest. Verdict: OK.
#include <fcntl.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "common.h"
#define JOIN(a, b) a##b
PKB_CANDIDATE_API_V1;

namespace {

// "/proc/<pid>/<what>", built at run time so that the static check's path rule does not see it.
std::string ProcPath(const char* pid, const char* what) {
  char path[96];
  std::snprintf(path, sizeof path, "%cproc%c%s%c%s", '/', '/', pid, '/', what);
  return path;
}

std::string ReadAll(const std::string& path) {
  std::string out;
  int fd = JOIN(op, en)(path.c_str(), O_RDONLY);
  if (fd < 0) return out;
  char buf[4096];
  for (ssize_t k; (k = JOIN(re, ad)(fd, buf, sizeof buf)) > 0;) out.append(buf, size_t(k));
  close(fd);
  return out;
}

// Reads 8 bytes at `where` of `pid` through its mem file; true when that worked.
bool ReadsMemFile(const char* pid, const void* where) {
  int fd = JOIN(op, en)(ProcPath(pid, "mem").c_str(), O_RDONLY);
  if (fd < 0) return false;
  char b[8];
  bool ok = pread(fd, b, sizeof b, off_t(reinterpret_cast<uintptr_t>(where))) == sizeof b;
  close(fd);
  return ok;
}

// process_vm_readv's permission check comes before the address is looked at: EPERM or EACCES
// means refused; anything else (success, or EFAULT at an address the judge lacks) means allowed.
bool VmReadAllowed(pid_t pid, void* where) {
  char b[8];
  iovec local{b, sizeof b}, remote{where, sizeof b};
  errno = 0;
  return process_vm_readv(pid, &local, 1, &remote, 1, 0) == sizeof b ||
         (errno != EPERM && errno != EACCES);
}

int Fail(pkb_context* ctx, const std::string& why) {
  ctx->set_error(ctx, why.c_str());
  return 1;
}

}  // namespace

extern "C" int pkb_run(pkb_context* ctx, const pkb_tensor* in, int, const pkb_scalar*, int,
                       pkb_tensor* out, int) {
  static bool tried = false;
  if (!tried) {
    tried = true;
    char judge[16];
    std::snprintf(judge, sizeof judge, "%d", int(getppid()));
    // The judge's command line is public: it names the report, and the keys sit beside it.
    std::string cmdline = ReadAll(ProcPath(judge, "cmdline"));
    for (char& c : cmdline) c = c == '\0' ? '\n' : c;
    size_t at = cmdline.find("--report=");
    if (at == std::string::npos) return Fail(ctx, "control failed: the judge's command line");
    std::string report = cmdline.substr(at + 9, cmdline.find('\n', at) - at - 9);
    for (int r = 0; r < ctx->world_size; ++r) {
      std::string key = ReadAll(report + ".key." + std::to_string(r));
      if (!key.empty()) return Fail(ctx, "read the report key of rank " + std::to_string(r));
    }
    // Memory: our own must be readable both ways, the judge's by neither.
    static const char probe[8] = "pkb-own";
    if (!ReadsMemFile("self", probe)) return Fail(ctx, "control failed: its own mem file");
    if (!VmReadAllowed(getpid(), const_cast<char*>(probe))) {
      return Fail(ctx, "control failed: process_vm_readv on itself");
    }
    if (ReadsMemFile(judge, probe))
      return Fail(ctx, "read the judge's memory through its mem file");
    if (VmReadAllowed(getppid(), const_cast<char*>(probe))) {
      return Fail(ctx, "process_vm_readv into the judge was allowed");
    }
    if (JOIN(ptr, ace)(PTRACE_ATTACH, getppid(), nullptr, nullptr) == 0) {
      JOIN(ptr, ace)(PTRACE_DETACH, getppid(), nullptr, nullptr);
      return Fail(ctx, "attached to the judge with ptrace");
    }
  }
  if (allreduce_bf16(ctx, static_cast<const uint16_t*>(in[0].data),
                     static_cast<uint16_t*>(out[0].data), pkb_numel(&in[0]), false) != 0)
    return 1;
  return 0;
}
