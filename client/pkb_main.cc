// pkb: the command-line client of the PKB evaluation service. See `pkb --help` and
// docs/service.md; exit codes in client/exit_codes.h.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "client/cli.h"
#include "client/exit_codes.h"

namespace pkb {
namespace {

using cli::AddCheck, cli::AddGetOrCancel, cli::AddHistory, cli::AddLeaderboard, cli::AddProblemShow,
    cli::AddProblemsList, cli::AddSubmissions, cli::AddSubmit, cli::AddSuite, cli::AddVoidWorker,
    cli::AddWatch, cli::Command, cli::Dial, cli::Globals, cli::Session;

int ExecEngine(int argc, char** argv) {
  std::error_code ec;
  auto self = std::filesystem::canonical("/proc/self/exe", ec);
  std::string engine = "pkb-eval";
  for (auto c : {self.parent_path() / "pkb-eval",
                 self.parent_path().parent_path() / "worker" / "engine" / "pkb-eval"}) {
    if (std::filesystem::exists(c, ec)) {
      engine = c.string();
      break;
    }
  }
  std::vector<char*> args = {engine.data()};
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  execvp(args[0], args.data());
  std::perror(("pkb eval: cannot run " + engine).c_str());
  return kExitError;
}

int Main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "eval") return ExecEngine(argc, argv);
  Session s;
  Globals& g = s.g;
  if (const char* env = std::getenv("PKB_COORDINATOR")) g.coordinator = env;
  if (const char* env = std::getenv("PKB_TOKEN")) g.token = env;
  if (const char* env = std::getenv("PKB_TLS_CA")) g.tls_ca = env;
  CLI::App app{
      "pkb: submit kernels to the ParallelKernelBench service and read verdicts.\n"
      "Exit codes: 0 OK, 10 COMPILE_ERROR, 11 RUNTIME_ERROR, 12 MISMATCH, 13 TIMEOUT, 14 "
      "REJECTED,\n"
      "15 WORKER_LOST, 16 INTERNAL, 17 NO_DEVICE, 18 CANCELLED, 19 VOIDED, 20 not done yet; 2 "
      "usage,\n"
      "3 coordinator unavailable or rate-limited, 4 not found, 5 rejected request, 6 no or bad "
      "token,\n1 other errors."};
  app.require_subcommand(1);
  app.fallthrough();  // global options (--json, --token, ...) may follow the command too
  app.add_option("--coordinator", g.coordinator, "host:port (env PKB_COORDINATOR)")
      ->capture_default_str();
  app.add_option("--token", g.token, "bearer token (env PKB_TOKEN)");
  app.add_option("--tls-ca", g.tls_ca, "PEM root certificates: connect with TLS (env PKB_TLS_CA)");
  app.add_flag("--json", g.json, "print JSON lines (proto3 JSON) for programs");
  app.add_option("--connect-timeout", g.connect_timeout_s,
                 "seconds to wait for a connection to the coordinator (not for the verdict: a "
                 "submit or watch follows its job until DONE)")
      ->capture_default_str();
  app.add_option("--follow-timeout", g.follow_timeout_s,
                 "seconds a submit or watch keeps reattaching to a coordinator that went away")
      ->capture_default_str();

  std::vector<Command> commands = {AddCheck(app), AddSubmit(app), AddWatch(app),
                                   AddGetOrCancel(app, false), AddGetOrCancel(app, true)};
  auto* admin = app.add_subcommand("admin", "operations for admin tokens");
  admin->require_subcommand(1);
  commands.push_back(AddVoidWorker(*admin));
  auto* problems = app.add_subcommand("problems", "the problems");
  problems->require_subcommand(1);
  commands.push_back(AddProblemsList(*problems));
  commands.push_back(AddProblemShow(*problems));
  for (auto add : {AddLeaderboard, AddSuite, AddSubmissions, AddHistory}) {
    commands.push_back(add(app));
  }
  app.add_subcommand("eval",
                     "run the evaluation engine (pkb-eval) locally with the arguments that follow");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }
  s.channel = Dial(g);
  s.stub = v1::Evaluation::NewStub(s.channel);
  for (Command& c : commands) {
    if (c.app->parsed()) return c.run(s);
  }
  return kExitUsage;
}

}  // namespace
}  // namespace pkb

int main(int argc, char** argv) { return pkb::Main(argc, argv); }
