// The sandbox, tested with real bubblewrap, namespaces and compilers. On a machine where user
// namespaces are disabled these tests exit 77, which ctest reports as skipped, with the reason.
#include "worker/engine/sandbox.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/subprocess.h"
#include "worker/engine/compiler.h"
#include "worker/engine/launcher.h"

namespace pkb {
namespace {

void RequireSandbox() {
  static absl::Status status = ProbeSandbox(SandboxPolicy{});
  if (!status.ok()) {
    std::cerr << "SKIPPED: " << status.message() << "\n";
    std::_Exit(77);
  }
}

struct Scratch {
  std::string dir;
  Scratch() {
    auto d = MakeTempDir("/tmp/pkb-test", "sandbox-");
    REQUIRE(d.ok());
    dir = *d;
    std::filesystem::permissions(dir, std::filesystem::perms(0711));  // as the engine does
  }
  ~Scratch() { (void)RemoveTree(dir); }
};

SubprocessResult RunSandboxed(const SandboxPolicy& policy, const std::string& script,
                              std::map<std::string, std::string> env = {}) {
  auto argv = SandboxCommand(policy, {"/bin/bash", "-c", script});
  REQUIRE(argv.ok());
  SubprocessOptions o;
  o.argv = *argv;
  o.merge_stderr = true;
  o.timeout = absl::Seconds(30);
  o.clear_env = true;
  for (const auto& kv : SandboxEnvironment("/tmp")) {
    o.env[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
  }
  for (const auto& [k, v] : env) o.env[k] = v;
  auto r = RunSubprocess(o);
  REQUIRE(r.ok());
  return *r;
}

TEST_CASE("sandbox: writes land in scratch only, the rest is read-only or absent", "[sandbox]") {
  RequireSandbox();
  Scratch s, secret_dir;
  REQUIRE(WriteFileAtomic(secret_dir.dir + "/token", "s3cret").ok());
  SandboxPolicy p;
  p.scratch = s.dir;
  auto r = RunSandboxed(p, "echo hi > ./out && "
                           "! touch /usr/pkb-x 2>/dev/null && ! touch /etc/passwd 2>/dev/null && "
                           "! cat " + secret_dir.dir + "/token 2>/dev/null && "
                           "! ls /root/.cache 2>/dev/null && ! ls /home/* 2>/dev/null && "
                           "test ! -e /etc/shadow && echo confined");
  CHECK(r.out.find("confined") != std::string::npos);
  CHECK(ReadFile(s.dir + "/out").value_or("") == "hi\n");
}

TEST_CASE("sandbox: no network, no host processes, an unprivileged uid", "[sandbox]") {
  RequireSandbox();
  Scratch s;
  // A listener on the host's loopback that the sandbox must not reach.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(listen(fd, 4) == 0);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  int port = ntohs(addr.sin_port);
  SandboxPolicy p;
  p.scratch = s.dir;
  auto r = RunSandboxed(
      p, absl::StrCat("if echo x > /dev/tcp/127.0.0.1/", port,
                      " 2>/dev/null; then echo REACHED; fi; "
                      "echo procs=$(ls -d /proc/[0-9]* | wc -l); echo uid=$(id -u); "
                      "grep CapEff /proc/self/status"));
  close(fd);
  CHECK(r.out.find("REACHED") == std::string::npos);
  CHECK(r.out.find("procs=") != std::string::npos);
  int procs = std::atoi(r.out.substr(r.out.find("procs=") + 6).c_str());
  CHECK(procs < 10);  // bwrap, bash, ls and the like: the host's processes are not visible
  if (geteuid() == 0) CHECK(r.out.find("uid=65534") != std::string::npos);
  CHECK(r.out.find("CapEff:\t0000000000000000") != std::string::npos);
}

TEST_CASE("sandbox: the environment is an allow-list, secrets do not pass", "[sandbox]") {
  RequireSandbox();
  Scratch s;
  setenv("PKB_TOKEN", "s3cret-token", 1);
  setenv("NCCL_DEBUG", "WARN", 1);
  SandboxPolicy p;
  p.scratch = s.dir;
  auto r = RunSandboxed(p, "env");
  unsetenv("PKB_TOKEN");
  CHECK(r.out.find("s3cret-token") == std::string::npos);
  CHECK(r.out.find("NCCL_DEBUG=WARN") != std::string::npos);
  CHECK(r.out.find("HOME=/tmp") != std::string::npos);
}

TEST_CASE("sandbox: resource limits hold (file size, processes, core dumps)", "[sandbox]") {
  RequireSandbox();
  Scratch s;
  SandboxPolicy p;
  p.scratch = s.dir;
  p.max_file_bytes = 1 << 20;
  p.max_processes = 64;
  auto r = RunSandboxed(p,
                        "ulimit -c; ulimit -u; "
                        "head -c 2000000 /dev/zero > big 2>/dev/null; echo size=$(stat -c %s big); "
                        "for i in $(seq 200); do sleep 5 & done 2>/dev/null; "
                        "echo started=$(jobs -p | wc -l); kill $(jobs -p) 2>/dev/null; true");
  CHECK(r.out.find("0\n64\n") == 0);
  CHECK(r.out.find("size=1048576") != std::string::npos);
  int started = std::atoi(r.out.substr(r.out.find("started=") + 8).c_str());
  CHECK(started < 64);
}

TEST_CASE("sandbox: a compile cannot #include files outside the allowed folders", "[sandbox]") {
  RequireSandbox();
  Scratch s, api, secret_dir;
  std::filesystem::create_directories(api.dir + "/pkb");
  std::filesystem::permissions(api.dir, std::filesystem::perms(0755));  // an install folder
  REQUIRE(WriteFileAtomic(api.dir + "/pkb/candidate.h", "// api\n").ok());
  REQUIRE(WriteFileAtomic(secret_dir.dir + "/answer.h", "int answer = 42;\n").ok());
  SandboxPolicy policy;
  CompilerOptions co;
  co.api_include_dir = api.dir;
  co.scratch_dir = s.dir;
  co.sandbox = &policy;
  CandidateCompiler compiler(co);
  // Allowed: the candidate API's folder and the system's headers.
  auto ok = compiler.Compile("#include <pkb/candidate.h>\n#include <vector>\nint f() { return 1; }\n",
                             "ok.cc");
  INFO(ok.status().message());
  REQUIRE(ok.ok());
  INFO(ok->report.log());
  CHECK(ok->report.ok());
  // (The sandbox's /proc is its own: only its own processes, with the allow-listed environment.)
  for (const std::string& path : {secret_dir.dir + "/answer.h", std::string("/etc/shadow"),
                                  std::string("/root/.bashrc")}) {
    auto bad = compiler.Compile(absl::StrCat("#include \"", path, "\"\nint g() { return 0; }\n"),
                                "bad.cc");
    REQUIRE(bad.ok());
    INFO(path << ": " << bad->report.log());
    CHECK_FALSE(bad->report.ok());
  }
}

TEST_CASE("sandbox: an include folder reached through a symbolic link compiles", "[sandbox]") {
  RequireSandbox();
  namespace fs = std::filesystem;
  Scratch s, install;
  fs::permissions(install.dir, fs::perms(0755));  // an install folder
  // The headers in a versioned folder, reached through a link, as installs and checkouts often
  // are: the flags and the sandbox's binds must name the same real folder.
  const std::string real = install.dir + "/include-1.0";
  fs::create_directories(real);
  fs::copy(std::string(PKB_SOURCE_DIR) + "/include/pkb", real + "/pkb",
           fs::copy_options::recursive);
  fs::create_directory_symlink(real, install.dir + "/include");
  SandboxPolicy policy;
  CompilerOptions co;
  co.nvcc = fs::exists("/usr/local/cuda/bin/nvcc") ? "/usr/local/cuda/bin/nvcc" : "nvcc";
  co.api_include_dir = install.dir + "/include";
  co.scratch_dir = s.dir;
  co.sandbox = &policy;
  CandidateCompiler compiler(co);
  const std::string source =
      "#include <pkb/candidate.h>\nPKB_CANDIDATE_API_V1;\n"
      "extern \"C\" int pkb_run(pkb_context*, const pkb_tensor*, int, const pkb_scalar*, int,\n"
      "                         pkb_tensor*, int) { return 0; }\n";
  for (const char* name : {"k.cc", "k.cu"}) {
    auto r = compiler.Compile(source, name);
    INFO(name << ": " << (r.ok() ? r->report.log() : std::string(r.status().message())));
    REQUIRE(r.ok());
    CHECK(r->report.ok());
    CHECK(r->report.command().find("-I" + real + " ") != std::string::npos);
  }
  // A folder that does not exist is named, never bound or passed as an empty path.
  co.api_include_dir = install.dir + "/missing";
  auto missing = CandidateCompiler(co).Compile(source, "k.cc");
  CHECK(missing.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(missing.status().message()).find(install.dir + "/missing") !=
        std::string::npos);
  SandboxPolicy empty;
  empty.scratch = s.dir;
  empty.read_only = {""};
  auto refused = SandboxCommand(empty, {"/bin/true"});
  CHECK(std::string(refused.status().message()).find("empty read-only path") != std::string::npos);
}

// Ranks of one job share a sandbox through pkb-rank-group.
LaunchSpec GroupedShellRanks(const std::string& script, int world, const std::string& dir,
                             const SandboxPolicy* policy) {
  LaunchSpec s;
  s.rank_binary = "/bin/sh";
  s.args = {"-c", script};
  s.world = world;
  s.scratch_dir = dir;
  s.timeout = absl::Seconds(20);
  s.grace_after_failure = absl::Milliseconds(500);
  s.sandbox = policy;
  s.group_binary = PKB_RANK_GROUP_BINARY;
  return s;
}

TEST_CASE("sandbox: grouped ranks share one sandbox and report each exit", "[sandbox]") {
  RequireSandbox();
  Scratch s;
  SandboxPolicy policy;
  policy.read_only = {std::filesystem::path(PKB_RANK_GROUP_BINARY).parent_path().string()};
  std::vector<std::string> progress;
  // Each rank leaves a file in the shared /tmp; rank 0 waits until it sees all of them. Then each
  // reads a line of its stdin: rank 0 alone gets the answer to its progress line.
  auto spec = GroupedShellRanks(
      "touch /tmp/r$PKB_RANK; if [ $PKB_RANK = 0 ]; then while [ $(ls /tmp | wc -l) -lt 3 ]; do "
      "sleep 0.05; done; echo PKB-PROGRESS {\\\"shared\\\": true}; fi; read -r w; "
      "echo log$PKB_RANK word[$w] >&2",
      3, s.dir, &policy);
  spec.answer_rank0 = true;
  spec.on_progress = [&](const std::string& l) {
    progress.push_back(l);
    return std::string("go\n");
  };
  auto r = RankLauncher().Run(spec);
  REQUIRE(r.ok());
  CHECK_FALSE(r->timed_out);
  CHECK(r->first_failed == -1);
  REQUIRE(r->ranks.size() == 3);
  CHECK(progress == std::vector<std::string>{"{\"shared\": true}"});
  for (int i = 0; i < 3; ++i) {
    CHECK(r->ranks[i].exit_code == 0);
    CHECK(TailOfFile(r->ranks[i].log_path, 100)
              .find(absl::StrCat("log", i, i == 0 ? " word[go]" : " word[]")) != std::string::npos);
  }
}

TEST_CASE("sandbox: a crashing grouped rank is named, the others are ended", "[sandbox]") {
  RequireSandbox();
  Scratch s;
  SandboxPolicy policy;
  policy.read_only = {std::filesystem::path(PKB_RANK_GROUP_BINARY).parent_path().string()};
  auto spec = GroupedShellRanks(
      "if [ $PKB_RANK = 2 ]; then echo dying >&2; kill -SEGV $$; fi; sleep 60", 4, s.dir, &policy);
  auto r = RankLauncher().Run(spec);
  REQUIRE(r.ok());
  CHECK_FALSE(r->timed_out);
  REQUIRE(r->first_failed == 2);
  CHECK(r->ranks[2].term_signal == SIGSEGV);
  CHECK(TailOfFile(r->ranks[2].log_path, 100).find("dying") != std::string::npos);
  CHECK(r->elapsed < absl::Seconds(10));
}

TEST_CASE("sandbox: the wall-clock limit kills the whole sandbox", "[sandbox]") {
  RequireSandbox();
  Scratch s;
  SandboxPolicy policy;
  policy.read_only = {std::filesystem::path(PKB_RANK_GROUP_BINARY).parent_path().string()};
  // A rank that forks a grandchild which ignores SIGTERM and detaches into its own session.
  auto spec = GroupedShellRanks("setsid sh -c 'trap \"\" TERM; sleep 317' & sleep 317", 2, s.dir,
                                &policy);
  spec.timeout = absl::Milliseconds(800);
  auto r = RankLauncher().Run(spec);
  REQUIRE(r.ok());
  CHECK(r->timed_out);
  CHECK(r->elapsed < absl::Seconds(5));
  // Nothing of the sandbox is left: no process runs `sleep 317` (the kernel tears the pid
  // namespace down asynchronously after its init dies: allow it a moment).
  std::string left;
  for (int i = 0; i < 200; ++i) {  // up to 20 s: CI runs this beside MPI tests
    auto ps = RunSubprocess({.argv = {"pgrep", "-f", "sleep 317"}});
    REQUIRE(ps.ok());
    left = ps->out;
    if (left.empty()) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  CHECK(left.empty());
}

}  // namespace
}  // namespace pkb
