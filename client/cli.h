// The pkb command-line client's parts (client/pkb_main.cc): the global options, the session
// with the coordinator and the helpers every subcommand uses (cli_common.cc), and the
// subcommands, each an Add* that registers its options and returns what runs it: the jobs
// (cli_jobs.cc) and the problems, boards and histories (cli_boards.cc). Internal to the client.
#ifndef PKB_CLIENT_CLI_H_
#define PKB_CLIENT_CLI_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pkb/v1/evaluation.grpc.pb.h"
#include "pkb/v1/leaderboard.pb.h"

namespace pkb::cli {

struct Globals {
  std::string coordinator = "127.0.0.1:7311";
  bool json = false;
  double connect_timeout_s = 10;  // for connecting only, never for following a job
  double follow_timeout_s = 600;  // how long a follow waits for a coordinator that went away
  std::string token;              // bearer token (env PKB_TOKEN)
  std::string tls_ca;             // PEM roots: TLS to the coordinator (env PKB_TLS_CA)
};

// Every call carries the token, when there is one.
void Authorize(const Globals& g, grpc::ClientContext* ctx);

// "2026-12-01", "2026-12-01T12:00:00Z" (RFC 3339) or microseconds since the epoch.
bool ParseWhen(const std::string& text, int64_t* micros);

// SubmitRequest.language from a candidate's file name: C++ sources are host-only candidates.
std::string LanguageOfFile(const std::string& file);

// Adds the result filter's options to a subcommand.
void AddFilterOptions(CLI::App* cmd, v1::ResultFilter* f);

int ExitForRpc(const grpc::Status& st);

int Fail(const grpc::Status& st, const Globals& g);

std::shared_ptr<grpc::Channel> Dial(const Globals& g);

void PrintResult(const v1::EvalResult& r);

// The shapes of a result with shape runs: "1024x1024 1.600x, 512x2048 1.200x, 1536x1024 -".
std::string DescribeShapes(const v1::Confirmation& c);

// "confirmed 1.600x (2.000x, then 1.600x)", "pending: ...", for boards and histories.
std::string DescribeConfirmation(const v1::Confirmation& c);

void PrintEvent(const v1::EvalEvent& e, absl::Time start);

// Waits for the channel to connect, at most --connect-timeout; the only deadline a follow has.
bool Connect(const Globals& g, grpc::Channel* channel);

// A broken stream worth reattaching to: the coordinator restarted or the network dropped.
bool Transient(const grpc::Status& st);

// Streams a job's events (Submit or Watch) until DONE, however long the job takes: only connecting
// has a deadline (--connect-timeout). A broken stream reattaches with Watch from the last sequence
// seen (a Submit cut before its first event is sent again: an identical job in flight is joined),
// backing off while the coordinator is away, for at most --follow-timeout seconds in a row.
// Returns the exit code of the verdict.
// Follows one job to its DONE (submitting it first when `submit` is given); its verdict goes to
// `done` when given.
int Stream(const Globals& g, grpc::Channel* channel, v1::Evaluation::Stub* stub,
           const v1::SubmitRequest* submit, std::string job_id, bool detach,
           v1::EvalResult* done = nullptr);

// The candidate's text, or a usage error naming the file.
absl::StatusOr<std::string> ReadSource(const std::string& file);

// What every subcommand runs with: the global options and a channel to the coordinator.
struct Session {
  Globals g;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Evaluation::Stub> stub;

  // A unary call's context: the token and the connect deadline (a follow has none: Stream).
  void Prepare(grpc::ClientContext* ctx) const {
    Authorize(g, ctx);
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::milliseconds(static_cast<int64_t>(g.connect_timeout_s * 1000)));
  }
};

// A subcommand: its options are registered on `app`, parsed into state that `run` holds, and
// `run` does it once `app` was parsed.
struct Command {
  CLI::App* app = nullptr;
  std::function<int(Session&)> run;
};

// The jobs (cli_jobs.cc).
Command AddCheck(CLI::App& app);

Command AddSubmit(CLI::App& app);

Command AddWatch(CLI::App& app);

// get and cancel: one call that answers the job, printed the same way.
Command AddGetOrCancel(CLI::App& app, bool cancel);

Command AddVoidWorker(CLI::App& admin);

// Problems, boards and histories (cli_boards.cc).
Command AddProblemsList(CLI::App& problems);

Command AddProblemShow(CLI::App& problems);

Command AddLeaderboard(CLI::App& app);

Command AddSuite(CLI::App& app);

Command AddSubmissions(CLI::App& app);

Command AddHistory(CLI::App& app);

}  // namespace pkb::cli

#endif  // PKB_CLIENT_CLI_H_
