// pkb-rank-group: starts the W rank processes of one CUDA job inside one sandbox, so that they
// share its network, IPC and pid namespaces (NCCL's bootstrap over loopback, CUDA IPC handles,
// /dev/shm), and reports how each one ended.
//
//   pkb-rank-group --world 4 --log-dir D --status-fd 3 --grace-ms 5000 -- pkb-rank ARGS...
//
// Rank i runs `pkb-rank ARGS... --rank=i --world-size=W --backend=cuda` with PKB_RANK=i; rank 0's
// stdout is ours (the engine reads progress from it), every rank's stderr (and the stdout of
// ranks > 0) is appended to D/rank<i>.log. When one rank fails, the others get `grace` (they are
// likely blocked in a collective with it) and are then killed. One line per rank,
// "<rank> <exit code> <signal>", goes to the status descriptor as it ends: the descriptor is not
// inherited by the ranks, and this process is not dumpable, so a rank running as the same uid can
// neither write to it nor attach to us. The wall-clock limit belongs to the caller, which kills
// the sandbox (and with it this pid namespace).
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

int64_t NowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

int Usage() {
  std::fprintf(stderr,
               "usage: pkb-rank-group --world W --log-dir D --status-fd N [--grace-ms MS] -- "
               "RANK_BINARY [ARGS...]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  prctl(PR_SET_DUMPABLE, 0);
  int world = 0, status_fd = -1, grace_ms = 5000;
  std::string log_dir;
  int i = 1;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (i + 1 >= argc) return Usage();
    if (a == "--world") {
      world = std::atoi(argv[++i]);
    } else if (a == "--log-dir") {
      log_dir = argv[++i];
    } else if (a == "--status-fd") {
      status_fd = std::atoi(argv[++i]);
    } else if (a == "--grace-ms") {
      grace_ms = std::atoi(argv[++i]);
    } else {
      return Usage();
    }
  }
  if (world < 1 || log_dir.empty() || status_fd < 0 || i >= argc) return Usage();
  fcntl(status_fd, F_SETFD, FD_CLOEXEC);
  std::vector<std::string> base(argv + i, argv + argc);

  std::vector<pid_t> pids(world, -1);
  for (int rank = 0; rank < world; ++rank) {
    std::vector<std::string> args = base;
    args.push_back("--rank=" + std::to_string(rank));
    args.push_back("--world-size=" + std::to_string(world));
    args.push_back("--backend=cuda");
    std::string log = log_dir + "/rank" + std::to_string(rank) + ".log";
    int log_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0) {
      std::fprintf(stderr, "pkb-rank-group: cannot open %s: %s\n", log.c_str(), strerror(errno));
      for (pid_t p : pids)
        if (p > 0) kill(p, SIGKILL);
      return 3;
    }
    pid_t pid = fork();
    if (pid == 0) {
      if (rank > 0) {
        // Rank 0 alone reads the engine's answers (launcher.h LaunchSpec::answer_rank0).
        dup2(log_fd, 1);
        if (int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC); devnull >= 0) dup2(devnull, 0);
      }
      dup2(log_fd, 2);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      setenv("PKB_RANK", std::to_string(rank).c_str(), 1);
      std::vector<char*> cargv;
      for (auto& a : args) cargv.push_back(a.data());
      cargv.push_back(nullptr);
      execvp(cargv[0], cargv.data());
      std::fprintf(stderr, "pkb-rank-group: cannot start %s: %s\n", cargv[0], strerror(errno));
      _exit(127);
    }
    close(log_fd);
    pids[rank] = pid;
  }

  // Reap ranks (and orphans: we may be the pid namespace's init) until every rank has ended.
  int alive = world;
  int64_t kill_at_ms = -1;
  while (alive > 0) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid == 0) {
      if (kill_at_ms >= 0 && NowMs() >= kill_at_ms) {
        for (pid_t p : pids)
          if (p > 0) kill(p, SIGKILL);
      }
      usleep(10000);
      continue;
    }
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    int rank = -1;
    for (int r = 0; r < world; ++r)
      if (pids[r] == pid) rank = r;
    if (rank < 0) continue;
    pids[rank] = -1;
    --alive;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    dprintf(status_fd, "%d %d %d\n", rank, code, sig);
    if ((code != 0 || sig != 0) && kill_at_ms < 0) kill_at_ms = NowMs() + grace_ms;
  }
  return 0;
}
