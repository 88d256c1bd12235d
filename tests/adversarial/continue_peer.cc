// Undoes the judge's stops between requests without starting a process: at W = 2 both ranks'
// hosts run in one sandbox as one user, so each host's helper thread finds the other host (its
// command line says --candidate-host) and sends it SIGCONT every millisecond, so that its code
// runs while its judge works between requests (where it could read a round's inputs as they land).
// Its calls are honest. The judge checks, before each request, that the host it stopped is still
// stopped and that no stop or continue but its own was reported, and waits for each stop to be
// reported: the host was continued by something else, or could not be stopped. (/proc, opendir,
// fopen and kill are hidden from the static check by token pasting.) Verdict: REJECTED, "ran
// between the judge's requests".
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "common.h"
#define JOIN(a, b) a##b
PKB_CANDIDATE_API_V1;

namespace {

std::string ProcPath(const char* tail) {
  char path[96];
  std::snprintf(path, sizeof path, "%cproc%c%s", '/', '/', tail);
  return path;
}

// The other candidate host's pid, 0 when none is found.
pid_t PeerHost() {
  DIR* proc = JOIN(open, dir)(ProcPath("").c_str());
  if (proc == nullptr) return 0;
  pid_t found = 0;
  while (dirent* e = readdir(proc)) {
    const long pid = std::strtol(e->d_name, nullptr, 10);
    if (pid <= 0 || pid == getpid()) continue;
    std::string tail = std::string(e->d_name) + "/cmdline";
    FILE* f = JOIN(fo, pen)(ProcPath(tail.c_str()).c_str(), "r");
    if (f == nullptr) continue;
    char cmd[4096];
    const size_t got = std::fread(cmd, 1, sizeof cmd - 1, f);
    std::fclose(f);
    for (size_t i = 0; i < got; ++i) {
      if (cmd[i] == '\0') cmd[i] = ' ';
    }
    cmd[got] = '\0';
    if (std::strstr(cmd, "--candidate-host") != nullptr) {
      found = static_cast<pid_t>(pid);
      break;
    }
  }
  closedir(proc);
  return found;
}

void* Continuer(void*) {
  for (;;) {
    const pid_t peer = PeerHost();
    for (int i = 0; peer > 0 && i < 1000; ++i) {
      JOIN(ki, ll)(peer, SIGCONT);
      usleep(1000);
    }
    usleep(1000);
  }
  return nullptr;
}

}  // namespace

extern "C" int pkb_init(pkb_context*) {
  pthread_t t;
  return pthread_create(&t, nullptr, Continuer, nullptr) == 0 ? 0 : 1;
}

extern "C" int pkb_run(pkb_context* ctx, const pkb_tensor* in, int, const pkb_scalar*, int,
                       pkb_tensor* out, int) {
  return allreduce_bf16(ctx, static_cast<const uint16_t*>(in[0].data),
                        static_cast<uint16_t*>(out[0].data), pkb_numel(&in[0]), false);
}
