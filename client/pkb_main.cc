// pkb: the command-line client of the PKB evaluation service. See `pkb --help` and
// docs/service.md; exit codes in client/exit_codes.h.
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/exit_codes.h"
#include "common/files.h"
#include "common/leaderboard_export.h"
#include "pkb/v1/admin.grpc.pb.h"
#include "pkb/v1/evaluation.grpc.pb.h"
#include "pkb/v1/leaderboard.grpc.pb.h"
#include "worker/engine/profiler.h"

namespace pkb {
namespace {

struct Globals {
  std::string coordinator = "127.0.0.1:7311";
  bool json = false;
  double connect_timeout_s = 10;  // for connecting only, never for following a job
  double follow_timeout_s = 600;  // how long a follow waits for a coordinator that went away
  std::string token;              // bearer token (env PKB_TOKEN)
  std::string tls_ca;             // PEM roots: TLS to the coordinator (env PKB_TLS_CA)
};

// Every call carries the token, when there is one.
void Authorize(const Globals& g, grpc::ClientContext* ctx) {
  if (!g.token.empty()) ctx->AddMetadata("authorization", "Bearer " + g.token);
}

// "2026-12-01", "2026-12-01T12:00:00Z" (RFC 3339) or microseconds since the epoch.
bool ParseWhen(const std::string& text, int64_t* micros) {
  absl::Time t;
  std::string err;
  if (absl::ParseTime("%Y-%m-%d", text, absl::UTCTimeZone(), &t, &err) ||
      absl::ParseTime(absl::RFC3339_full, text, &t, &err)) {
    *micros = absl::ToUnixMicros(t);
    return true;
  }
  return absl::SimpleAtoi(text, micros);
}

// SubmitRequest.language from a candidate's file name: C++ sources are host-only candidates.
std::string LanguageOfFile(const std::string& file) {
  std::string ext = std::filesystem::path(file).extension().string();
  return ext == ".cc" || ext == ".cpp" || ext == ".cxx" ? "cpp" : "cuda";
}

// Adds the result filter's options to a subcommand.
void AddFilterOptions(CLI::App* cmd, v1::ResultFilter* f) {
  cmd->add_option(
      "-p,--problem",
      [f](const CLI::results_t& r) {
        f->set_problem_id(std::stoi(r[0]));
        return true;
      },
      "problem id");
  cmd->add_option(
      "-w,--world-size",
      [f](const CLI::results_t& r) {
        f->set_world_size(std::stoi(r[0]));
        return true;
      },
      "world size");
  cmd->add_option("--gpu-class", *f->mutable_gpu_class(), "the class of the worker that ran it");
  cmd->add_option("--dtype", *f->mutable_dtype());
  cmd->add_option("--submitter", *f->mutable_submitter(), "the user");
  cmd->add_option("--model", *f->mutable_model());
  cmd->add_option("--agent", *f->mutable_agent());
  cmd->add_option("--tag", *f->mutable_tag());
  cmd->add_option(
      "--from",
      [f](const CLI::results_t& r) {
        int64_t t;
        if (!ParseWhen(r[0], &t)) return false;
        f->set_from_unix_micros(t);
        return true;
      },
      "finished at or after: YYYY-MM-DD, RFC 3339 or unix microseconds");
  cmd->add_option(
      "--to",
      [f](const CLI::results_t& r) {
        int64_t t;
        if (!ParseWhen(r[0], &t)) return false;
        f->set_to_unix_micros(t);
        return true;
      },
      "finished before");
  cmd->add_option(
      "--seeds",
      [f](const CLI::results_t& r) {
        if (r[0] == "any")
          f->set_seeds(v1::SEEDS_ANY);
        else if (r[0] == "public")
          f->set_seeds(v1::SEEDS_PUBLIC);
        else if (r[0] == "secret")
          f->set_seeds(v1::SEEDS_SECRET);
        else
          return false;
        return true;
      },
      "any, public or secret (ranked runs)");
}

int ExitForRpc(const grpc::Status& st) {
  switch (st.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return kExitUnavailable;
    case grpc::StatusCode::NOT_FOUND:
      return kExitNotFound;
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::PERMISSION_DENIED:
      return kExitDenied;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return kExitUnavailable;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
      return kExitInvalid;
    default:
      return kExitError;
  }
}

int Fail(const grpc::Status& st, const Globals& g) {
  if (g.json) {
    std::cout << "{\"error\":{\"code\":" << static_cast<int>(st.error_code()) << ",\"message\":\""
              << absl::StrReplaceAll(st.error_message(), {{"\\", "\\\\"}, {"\"", "\\\""}}) << "\"}}"
              << std::endl;
  }
  std::cerr << "pkb: " << st.error_message() << " (gRPC code " << static_cast<int>(st.error_code())
            << ")\n";
  return ExitForRpc(st);
}

std::shared_ptr<grpc::Channel> Dial(const Globals& g) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  if (!g.tls_ca.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ReadFile(g.tls_ca).value_or("");
    return grpc::CreateCustomChannel(g.coordinator, grpc::SslCredentials(ssl), args);
  }
  return grpc::CreateCustomChannel(g.coordinator, grpc::InsecureChannelCredentials(), args);
}

void PrintResult(const v1::EvalResult& r) {
  std::printf("verdict: %s%s — %s\n", v1::Status_Name(r.status()).c_str(),
              r.cached() ? " (cached)" : "", r.message().c_str());
  for (const auto& d : r.policy_findings()) {
    std::printf("  POLICY %s:%d: %s\n", d.file().c_str(), d.line(), d.message().c_str());
  }
  if (r.has_compile()) {
    for (const auto& d : r.compile().diagnostics()) {
      std::printf("  %s:%d:%d: %s: %s\n", d.file().c_str(), d.line(), d.column(),
                  d.severity().c_str(), d.message().c_str());
    }
  }
  int shown = 0;
  for (const auto& rt : r.rank_trials()) {
    if (rt.ok() || shown >= 8) continue;
    ++shown;
    std::printf("  rank %d trial %d: %s\n", rt.rank(), rt.trial(), rt.error().c_str());
    for (const auto& o : rt.outputs()) {
      if (o.ok()) continue;
      std::printf(
          "    output %d %s: %s max_abs %.3g max_rel %.3g bad %lld/%lld (first at %lld: want %.6g "
          "got %.6g)"
          " nan %lld unwritten %lld\n",
          o.index(), o.name().c_str(), o.problem().c_str(), o.max_abs_error(), o.max_rel_error(),
          static_cast<long long>(o.bad_count()), static_cast<long long>(o.numel()),
          static_cast<long long>(o.first_bad_index()), o.expected_at_first_bad(),
          o.actual_at_first_bad(), static_cast<long long>(o.nan_count()),
          static_cast<long long>(o.unwritten_count()));
    }
  }
  if (r.status() == v1::OK && r.functional()) {
    std::printf(
        "  functional run: no speedup; the candidate's %.2f us per call is not comparable "
        "(a short window%s)\n",
        r.candidate().wall_per_iter_us(),
        r.gpus_used() > 0
            ? absl::StrFormat(", %d rank(s) on %d GPU(s)", r.world_size(), r.gpus_used()).c_str()
            : "");
  } else if (r.status() == v1::OK) {
    std::printf(
        "  candidate %.2f us per call, baseline %.2f us (the judge's clock%s), speedup %.3fx "
        "(%.3fx-%.3fx; PKB's events figure %.3fx)\n",
        r.candidate().wall_per_iter_us(),
        r.baseline_node_samples() > 0 ? r.baseline_node_us() : r.baseline().wall_per_iter_us(),
        r.baseline_node_samples() > 0 ? "; the node's median" : "", r.speedup(), r.speedup_low(),
        r.speedup_high(), r.speedup_events());
    if (r.roofline().busbw_gbps() > 0) {
      std::printf("  algbw %.1f GB/s, busbw %.1f GB/s, %.1f%% of the NVLink roofline\n",
                  r.roofline().algbw_gbps(), r.roofline().busbw_gbps(),
                  r.roofline().percent_of_roofline());
    }
  }
  if (r.status() == v1::OK) {
    for (absl::string_view line : absl::StrSplit(ProfileText(r, 12), '\n', absl::SkipEmpty())) {
      std::printf("  %.*s\n", static_cast<int>(line.size()), line.data());
    }
  }
  if (!r.confirmation_job_id().empty() && r.shape_job_ids().empty()) {
    std::printf(
        "  confirmation run: job %s times it again; it ranks once that run is OK too, with the "
        "lower of the two speedups (pkb watch %s)\n",
        r.confirmation_job_id().c_str(), r.confirmation_job_id().c_str());
  }
  if (!r.confirmation_job_id().empty() && !r.shape_job_ids().empty()) {
    std::printf(
        "  confirmation run: job %s times it again, and shape runs %s time it at other shapes; "
        "it ranks once all are OK too, with the geometric mean over the shapes (pkb history "
        "shows each figure)\n",
        r.confirmation_job_id().c_str(), absl::StrJoin(r.shape_job_ids(), ", ").c_str());
  }
  if (r.shape_run()) {
    std::printf("  a shape run of job %s\n", r.confirms_job_id().c_str());
  } else if (!r.confirms_job_id().empty()) {
    std::printf("  a confirmation run of job %s\n", r.confirms_job_id().c_str());
  }
  if (!r.failed_rank_log().empty()) std::printf("  log tail:\n%s\n", r.failed_rank_log().c_str());
}

// The shapes of a result with shape runs: "1024x1024 1.600x, 512x2048 1.200x, 1536x1024 -".
std::string DescribeShapes(const v1::Confirmation& c) {
  std::vector<std::string> parts;
  for (const v1::ShapeFigure& f : c.shapes()) {
    std::string figure = "-";
    if (f.stage() == v1::DONE && f.status() == v1::OK) {
      figure = absl::StrFormat("%.3fx", f.speedup());
    } else if (f.stage() == v1::DONE) {
      figure = v1::Status_Name(f.status());
    } else {
      figure = "pending";
    }
    parts.push_back(absl::StrFormat("%dx%d %s", f.m(), f.n(), figure));
  }
  return absl::StrJoin(parts, ", ");
}

// "confirmed 1.600x (2.000x, then 1.600x)", "pending: ...", for boards and histories.
std::string DescribeConfirmation(const v1::Confirmation& c) {
  switch (c.state()) {
    case v1::CONFIRMED:
      if (c.shapes_size() > 0) {
        return absl::StrFormat(
            "confirmed %.3fx, the geometric mean over shapes (%s; the default shape %.3fx, "
            "then %.3fx in job %s)",
            c.speedup(), DescribeShapes(c), c.first_speedup(), c.confirmation_speedup(),
            c.job_id());
      }
      return absl::StrFormat("confirmed %.3fx (%.3fx, then %.3fx in job %s)", c.speedup(),
                             c.first_speedup(), c.confirmation_speedup(), c.job_id());
    case v1::CONFIRMATION_PENDING:
      if (c.shapes_size() > 0)
        return absl::StrCat("pending: ", c.reason(), " (", DescribeShapes(c), ")");
      return absl::StrCat("pending: ", c.reason());
    case v1::CONFIRMATION_FAILED:
      return absl::StrCat("not confirmed: ", c.reason());
    case v1::UNCONFIRMED:
      return "unconfirmed (finished before confirmation runs)";
    default:
      return "";
  }
}

void PrintEvent(const v1::EvalEvent& e, absl::Time start) {
  double t = absl::ToDoubleSeconds(absl::Now() - start);
  std::string extra;
  // Trial events carry their own words ("trial 2/5 correct on every rank"); mark failures.
  if (e.stage() == v1::VERIFYING && e.trial() >= 0 && !e.trial_ok()) extra = " FAILED";
  if (e.stage() != v1::DONE) {
    std::printf("[%6.1fs] %-12s%s %s\n", t, v1::Stage_Name(e.stage()).c_str(), extra.c_str(),
                e.message().c_str());
  } else {
    std::printf("[%6.1fs] DONE\n", t);
    PrintResult(e.result());
  }
  std::fflush(stdout);
}

// Waits for the channel to connect, at most --connect-timeout; the only deadline a follow has.
bool Connect(const Globals& g, grpc::Channel* channel) {
  return channel->WaitForConnected(
      std::chrono::system_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(g.connect_timeout_s * 1000)));
}

// A broken stream worth reattaching to: the coordinator restarted or the network dropped.
bool Transient(const grpc::Status& st) {
  switch (st.error_code()) {
    case grpc::StatusCode::OK:  // ended before DONE (the coordinator shut down)
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::ABORTED:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return true;
    default:
      return false;
  }
}

// Streams a job's events (Submit or Watch) until DONE, however long the job takes: only connecting
// has a deadline (--connect-timeout). A broken stream reattaches with Watch from the last sequence
// seen (a Submit cut before its first event is sent again: an identical job in flight is joined),
// backing off while the coordinator is away, for at most --follow-timeout seconds in a row.
// Returns the exit code of the verdict.
// Follows one job to its DONE (submitting it first when `submit` is given); its verdict goes to
// `done` when given.
int Stream(const Globals& g, grpc::Channel* channel, v1::Evaluation::Stub* stub,
           const v1::SubmitRequest* submit, std::string job_id, bool detach,
           v1::EvalResult* done = nullptr) {
  absl::Time start = absl::Now();
  int64_t last_seq = 0;
  absl::Duration backoff = absl::Milliseconds(200);
  absl::Time broken_since = absl::InfiniteFuture();
  while (true) {
    grpc::Status st;
    if (!Connect(g, channel)) {
      st = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        absl::StrCat("cannot reach ", g.coordinator, " within ",
                                     g.connect_timeout_s, " s (--connect-timeout)"));
    } else {
      grpc::ClientContext ctx;
      Authorize(g, &ctx);
      std::unique_ptr<grpc::ClientReader<v1::EvalEvent>> reader;
      if (submit != nullptr && job_id.empty()) {
        reader = stub->Submit(&ctx, *submit);
      } else {
        v1::WatchRequest w;
        w.set_job_id(job_id);
        w.set_after_sequence(last_seq);
        reader = stub->Watch(&ctx, w);
      }
      v1::EvalEvent e;
      while (reader->Read(&e)) {
        broken_since = absl::InfiniteFuture();
        backoff = absl::Milliseconds(200);
        if (job_id.empty()) {
          job_id = e.job_id();
          if (!g.json) std::printf("job %s\n", job_id.c_str());
        }
        if (e.sequence() <= last_seq) continue;  // replayed after a reattach
        last_seq = e.sequence();
        if (g.json) {
          std::cout << ToJson(e) << std::endl;
        } else {
          PrintEvent(e, start);
        }
        if (e.stage() == v1::DONE) {
          ctx.TryCancel();
          if (done) *done = e.result();
          return ExitCodeFor(e.result().status());
        }
        if (detach) {
          ctx.TryCancel();
          return kExitOk;
        }
      }
      st = reader->Finish();
    }
    const bool resubmit = job_id.empty() && submit != nullptr && !submit->no_cache();
    if (!Transient(st) || (job_id.empty() && !resubmit)) return Fail(st, g);
    absl::Time now = absl::Now();
    if (broken_since == absl::InfiniteFuture()) broken_since = now;
    if (now - broken_since > absl::Seconds(g.follow_timeout_s)) {
      std::cerr << "pkb: the coordinator has been unreachable for " << g.follow_timeout_s
                << " s (--follow-timeout): " << st.error_message() << "\n";
      if (job_id.empty()) return Fail(st, g);
      std::cerr << "pkb: job " << job_id << " may still run: `pkb watch " << job_id
                << "` follows it\n";
      return kExitNotDone;
    }
    std::cerr << "pkb: stream lost (" << st.error_message() << "); "
              << (job_id.empty() ? "submitting again" : "reattaching to " + job_id) << "\n";
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(5));
  }
}

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

// The candidate's text, or a usage error naming the file.
absl::StatusOr<std::string> ReadSource(const std::string& file) {
  auto source = ReadFile(file);
  if (!source.ok()) std::cerr << "pkb: " << source.status().message() << "\n";
  return source;
}

Command AddCheck(CLI::App& app) {
  struct Options {
    int problem = 0, world = 0;
    std::string file, dtype, language;
    bool compile = false;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "check",
      "check a source against the source policy, in milliseconds; with --compile also compile "
      "it on a worker, in seconds: no GPU, no job, nothing kept (exit 14 when a submission of it "
      "would be REJECTED for the policy, 10 when it does not compile, 3 when it could not be "
      "compiled now)");
  cmd->add_option("file", o->file, "the candidate")->required()->check(CLI::ExistingFile);
  cmd->add_option("-p,--problem", o->problem, "problem id")->required();
  cmd->add_option("-w,--world-size", o->world, "ranks (GPUs)")->required();
  cmd->add_option("--dtype", o->dtype, "default: the problem's");
  cmd->add_option("--language", o->language, "cuda or cpp (default: from the file name)");
  cmd->add_flag("--compile", o->compile,
                "also compile it, sandboxed on a worker, as a submission is compiled (up to "
                "120 s; counts against the token's submission rate)");
  return {
      cmd, [o](Session& s) -> int {
        auto source = ReadSource(o->file);
        if (!source.ok()) return kExitUsage;
        v1::CheckRequest r;
        r.set_problem_id(o->problem);
        r.set_world_size(o->world);
        r.set_source(*source);
        r.set_dtype(o->dtype);
        r.set_language(o->language.empty() ? LanguageOfFile(o->file) : o->language);
        r.set_compile(o->compile);
        grpc::ClientContext ctx;
        s.Prepare(&ctx);
        // The coordinator answers a compile within its 120 s deadline.
        if (o->compile)
          ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(150));
        v1::CheckAnswer a;
        grpc::Status st = s.stub->Check(&ctx, r, &a);
        if (!st.ok()) return Fail(st, s.g);
        if (s.g.json) {
          std::cout << ToJson(a) << std::endl;
        } else {
          std::printf("%s: %s\n", v1::CheckVerdict_Name(a.verdict()).c_str(), a.message().c_str());
          for (const auto& d : a.policy_findings()) {
            std::printf("  POLICY %s:%d: %s\n", d.file().c_str(), d.line(), d.message().c_str());
          }
          if (a.compile_verdict() != v1::CheckAnswer::COMPILE_VERDICT_UNSPECIFIED) {
            std::printf("%s: %s\n",
                        v1::CheckAnswer::CompileVerdict_Name(a.compile_verdict()).c_str(),
                        a.compile_message().c_str());
            for (const auto& d : a.compile().diagnostics()) {
              std::printf("  %s:%d:%d: %s: %s\n", d.file().c_str(), d.line(), d.column(),
                          d.severity().c_str(), d.message().c_str());
            }
          }
        }
        if (a.verdict() == v1::POLICY) return kExitRejected;
        switch (a.compile_verdict()) {
          case v1::CheckAnswer::COMPILE_ERROR:
            return kExitCompileError;
          case v1::CheckAnswer::NOT_COMPILED:
            return kExitUnavailable;
          default:
            return kExitOk;
        }
      }};
}

struct SubmitOptions {
  v1::SubmitRequest req;
  std::string file, dtype, gpu_class, submitter, model, agent, language;
  std::vector<std::string> tags;
  int64_t m = 0, n = 0;
  int trials = 0, warmup = 0, iters = 0;
  double min_window_ms = -1;  // negative: the default (10 ms)
  bool ranked = false, no_cache = false, functional = false, practice = false;
  bool wait_confirmation = false, detach = false;
};

int Submit(Session& s, SubmitOptions& o) {
  auto source = ReadSource(o.file);
  if (!source.ok()) return kExitUsage;
  v1::SubmitRequest& req = o.req;
  req.set_source(*source);
  // The job as a spec (spec.proto): what is not given is left to the coordinator's defaults.
  v1::EvalSpec& spec = *req.mutable_spec();
  spec.set_dtype(o.dtype);
  spec.set_m(o.m);
  spec.set_n(o.n);
  // 0 leaves the default, as it always did.
  if (o.trials != 0) spec.set_trials(o.trials);
  if (o.warmup != 0) spec.set_warmup(o.warmup);
  if (o.iters != 0) spec.set_iters(o.iters);
  if (o.min_window_ms >= 0) spec.set_min_window_ms(o.min_window_ms);
  spec.set_gpu_class(o.gpu_class);
  spec.set_language(o.language.empty() ? LanguageOfFile(o.file) : o.language);
  spec.set_ranked(o.ranked);
  spec.set_functional(o.functional);
  spec.set_practice(o.practice);
  req.set_no_cache(o.no_cache);
  req.set_submitter(o.submitter);
  req.set_model(o.model);
  req.set_agent(o.agent);
  for (const auto& t : o.tags) req.add_tags(t);
  v1::EvalResult result;
  int code = Stream(s.g, s.channel.get(), s.stub.get(), &req, "", o.detach, &result);
  if (!o.wait_confirmation || result.confirmation_job_id().empty()) return code;
  if (!s.g.json)
    std::printf("following confirmation run %s\n", result.confirmation_job_id().c_str());
  v1::EvalResult confirmed;
  code = Stream(s.g, s.channel.get(), s.stub.get(), nullptr, result.confirmation_job_id(), false,
                &confirmed);
  if (!s.g.json && confirmed.status() == v1::OK) {
    std::printf("confirmed: %.3fx, then %.3fx; the boards use %.3fx\n", result.speedup(),
                confirmed.speedup(), std::min(result.speedup(), confirmed.speedup()));
  } else if (!s.g.json && confirmed.status() != v1::STATUS_UNSPECIFIED) {
    std::printf("not confirmed: the confirmation run ended %s; the result does not rank\n",
                v1::Status_Name(confirmed.status()).c_str());
  }
  // A ranked result's shape runs: the boards use the geometric mean over the shapes.
  if (code != kExitOk || confirmed.status() != v1::OK || result.shape_job_ids().empty())
    return code;
  double log_sum = std::log(std::min(result.speedup(), confirmed.speedup()));
  for (const std::string& id : result.shape_job_ids()) {
    if (!s.g.json) std::printf("following shape run %s\n", id.c_str());
    v1::EvalResult shaped;
    code = Stream(s.g, s.channel.get(), s.stub.get(), nullptr, id, false, &shaped);
    if (code != kExitOk || shaped.status() != v1::OK) {
      if (!s.g.json && shaped.status() != v1::STATUS_UNSPECIFIED) {
        std::printf(
            "not confirmed: the shape run at m=%lld, n=%lld ended %s; the result does not "
            "rank\n",
            static_cast<long long>(shaped.m()), static_cast<long long>(shaped.n()),
            v1::Status_Name(shaped.status()).c_str());
      }
      return code;
    }
    if (!s.g.json) {
      std::printf("shape m=%lld, n=%lld: %.3fx\n", static_cast<long long>(shaped.m()),
                  static_cast<long long>(shaped.n()), shaped.speedup());
    }
    log_sum += std::log(shaped.speedup());
  }
  if (!s.g.json) {
    std::printf("the boards use %.3fx, the geometric mean over the %d shapes\n",
                std::exp(log_sum / (result.shape_job_ids_size() + 1)),
                result.shape_job_ids_size() + 1);
  }
  return code;
}

Command AddSubmit(CLI::App& app) {
  auto o = std::make_shared<SubmitOptions>();
  auto* cmd = app.add_subcommand("submit", "submit a candidate and stream its verdict");
  cmd->add_option("file", o->file, "the candidate: .cu, or .cc/.cpp/.cxx for a host-only one")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option(
         "-p,--problem",
         [o](const CLI::results_t& r) {
           o->req.mutable_spec()->set_problem_id(std::stoi(r[0]));
           return true;
         },
         "problem id")
      ->required();
  cmd->add_option(
         "-w,--world-size",
         [o](const CLI::results_t& r) {
           o->req.mutable_spec()->set_world_size(std::stoi(r[0]));
           return true;
         },
         "ranks (GPUs)")
      ->required();
  cmd->add_option("--dtype", o->dtype, "default: the problem's");
  cmd->add_option("--m", o->m, "default: the problem's");
  cmd->add_option("--n", o->n, "default: the problem's");
  cmd->add_option("--trials", o->trials);
  cmd->add_option("--warmup", o->warmup);
  cmd->add_option("--iters", o->iters, "timed calls per window, at least (default 100)");
  cmd->add_option("--min-window-ms", o->min_window_ms,
                  "each side's window runs more calls than --iters until it lasts this long "
                  "(default 10; 0: exactly --iters, PKB's count)");
  cmd->add_option("--gpu-class", o->gpu_class, "h200, h100, cpu, any (default: the coordinator's)");
  cmd->add_option("--language", o->language,
                  "cuda, or cpp: a host-only C++ candidate for GPU-less workers (default: from "
                  "the file's extension, .cc/.cpp/.cxx being cpp)")
      ->check(CLI::IsMember({"cuda", "cpp"}));
  cmd->add_flag("--no-cache", o->no_cache, "run again even if an identical result exists");
  cmd->add_option("--submitter", o->submitter);
  cmd->add_option("--model", o->model, "the model that wrote the candidate");
  cmd->add_option("--agent", o->agent, "the agent or harness that drove it");
  cmd->add_option("--tag", o->tags, "a label (repeat for several)");
  cmd->add_flag("--ranked", o->ranked, "run on the coordinator's secret seed (ranked run)");
  cmd->add_flag("--functional", o->functional,
                "correctness only, for W beyond the GPUs you can get: the ranks may share a "
                "node's GPUs, the candidate gets no NCCL communicator, no speedup, never ranks");
  cmd->add_flag("--practice", o->practice,
                "a practice run: never ranks, and a REJECTED verdict does not disqualify the "
                "source (public seeds only)");
  cmd->add_flag("--wait-confirmation", o->wait_confirmation,
                "after an OK verdict, follow its confirmation run too, and a ranked one's shape "
                "runs (the figure the boards use); the exit code is then theirs");
  cmd->add_flag("--detach", o->detach, "print the first event (with the job id) and return");
  return {cmd, [o](Session& s) -> int { return Submit(s, *o); }};
}

Command AddWatch(CLI::App& app) {
  auto job_id = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("watch", "reattach to a job: its whole history, then live events");
  cmd->add_option("job_id", *job_id)->required();
  return {cmd, [job_id](Session& s) -> int {
            return Stream(s.g, s.channel.get(), s.stub.get(), nullptr, *job_id, false);
          }};
}

// get and cancel: one call that answers the job, printed the same way.
Command AddGetOrCancel(CLI::App& app, bool cancel) {
  auto job_id = std::make_shared<std::string>();
  auto* cmd = cancel ? app.add_subcommand("cancel", "cancel a job")
                     : app.add_subcommand("get", "a job's state and verdict");
  cmd->add_option("job_id", *job_id)->required();
  return {cmd, [job_id, cancel](Session& s) -> int {
            grpc::ClientContext ctx;
            s.Prepare(&ctx);
            v1::Job job;
            grpc::Status st;
            if (cancel) {
              v1::CancelRequest r;
              r.set_job_id(*job_id);
              st = s.stub->Cancel(&ctx, r, &job);
            } else {
              v1::GetJobRequest r;
              r.set_job_id(*job_id);
              st = s.stub->Get(&ctx, r, &job);
            }
            if (!st.ok()) return Fail(st, s.g);
            if (s.g.json) {
              std::cout << ToJson(job) << std::endl;
            } else {
              std::printf("job %s: %s, attempt %d%s%s\n", job.job_id().c_str(),
                          v1::Stage_Name(job.stage()).c_str(), job.attempts(),
                          job.worker_id().empty() ? "" : ", on worker ", job.worker_id().c_str());
              if (job.stage() == v1::DONE) PrintResult(job.result());
            }
            if (job.stage() != v1::DONE) return cancel ? kExitOk : kExitNotDone;
            return cancel ? kExitOk : ExitCodeFor(job.result().status());
          }};
}

Command AddVoidWorker(CLI::App& admin) {
  struct Options {
    std::string worker, reason;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = admin.add_subcommand(
      "void-worker",
      "void every verdict a worker reported (status VOIDED: off the boards, never cached)");
  cmd->add_option("worker_id", o->worker)->required();
  cmd->add_option("--reason", o->reason, "why (kept in every voided result)")->required();
  return {cmd, [o](Session& s) -> int {
            auto admin_stub = v1::Admin::NewStub(s.channel);
            grpc::ClientContext ctx;
            Authorize(s.g, &ctx);
            ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(10));
            v1::VoidWorkerRequest r;
            r.set_worker_id(o->worker);
            r.set_reason(o->reason);
            v1::VoidWorkerAnswer a;
            grpc::Status st = admin_stub->VoidWorker(&ctx, r, &a);
            if (!st.ok()) return Fail(st, s.g);
            if (s.g.json) {
              std::cout << ToJson(a) << std::endl;
            } else {
              std::printf("voided %d results of worker %s\n", a.voided(), o->worker.c_str());
              for (const auto& id : a.job_ids()) std::printf("  %s\n", id.c_str());
            }
            return kExitOk;
          }};
}

Command AddProblemsList(CLI::App& problems) {
  auto* cmd = problems.add_subcommand("list", "every problem, one a line");
  return {cmd, [](Session& s) -> int {
            grpc::ClientContext ctx;
            s.Prepare(&ctx);
            v1::ProblemCatalog catalog;
            grpc::Status st = s.stub->ListProblems(&ctx, v1::ListProblemsRequest(), &catalog);
            if (!st.ok()) return Fail(st, s.g);
            for (const auto& p : catalog.problems()) {
              if (s.g.json) {
                std::cout << ToJson(p) << std::endl;
                continue;
              }
              std::string ws;
              for (const auto& l : p.layouts()) {
                if (l.supported()) absl::StrAppend(&ws, ws.empty() ? "" : ",", l.world_size());
              }
              std::printf("%3d  %-36s %-16s W=%s\n", p.id(), p.slug().c_str(), p.category().c_str(),
                          ws.c_str());
            }
            return kExitOk;
          }};
}

Command AddProblemShow(CLI::App& problems) {
  auto which = std::make_shared<std::string>();
  auto source = std::make_shared<bool>(false);
  auto* cmd = problems.add_subcommand("show", "one problem's full spec");
  cmd->add_option("problem", *which, "id or slug")->required();
  cmd->add_flag("--source", *source,
                "print the problem's own code (inputs, reference, oracle) instead of the spec");
  return {cmd, [which, source](Session& s) -> int {
            grpc::ClientContext ctx;
            s.Prepare(&ctx);
            v1::GetProblemRequest r;
            int id = 0;
            if (absl::SimpleAtoi(*which, &id)) {
              r.set_id(id);
            } else {
              r.set_slug(*which);
            }
            v1::ProblemSpec spec;
            grpc::Status st = s.stub->GetProblem(&ctx, r, &spec);
            if (!st.ok()) return Fail(st, s.g);
            if (s.g.json) {
              std::cout << ToJson(spec) << std::endl;
              return kExitOk;
            }
            if (*source) {
              for (const v1::SourceFile& f : spec.sources())
                std::printf("// ==== %s\n%s\n", f.path().c_str(), f.text().c_str());
              return kExitOk;
            }
            std::printf("%d %s (version %d)\n\n%s\n\n", spec.id(), spec.slug().c_str(),
                        spec.version(), spec.statement().c_str());
            std::printf("reference time per call on this service (default shape and dtype):\n");
            if (spec.reference_times().empty()) std::printf("  none measured yet\n");
            for (const v1::ReferenceTime& t : spec.reference_times()) {
              std::printf("  W=%d %-8s median %.2f us (p10 %.2f, p90 %.2f; %d results)",
                          t.world_size(), t.gpu_class().c_str(), t.median_us(), t.p10_us(),
                          t.p90_us(), t.samples());
              if (t.graph_median_us() > 0)
                std::printf("; as a CUDA graph %.2f us", t.graph_median_us());
              std::printf("\n");
            }
            std::printf("code: %d file(s) (pkb problems show %d --source)\n\n", spec.sources_size(),
                        spec.id());
            spec.clear_sources();
            std::string out;
            google::protobuf::util::JsonPrintOptions o;
            o.add_whitespace = true;
            (void)google::protobuf::util::MessageToJsonString(spec, &out, o);
            std::printf("%s", out.c_str());
            return kExitOk;
          }};
}

Command AddLeaderboard(CLI::App& app) {
  struct Options {
    v1::LeaderboardQuery q;
    bool csv = false;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "leaderboard", "per board (problem, W, dtype, GPU class) the best result per user or model");
  AddFilterOptions(cmd, o->q.mutable_filter());
  cmd->add_option(
      "--by",
      [o](const CLI::results_t& r) {
        if (r[0] == "user")
          o->q.set_group_by(v1::GROUP_BY_USER);
        else if (r[0] == "model")
          o->q.set_group_by(v1::GROUP_BY_MODEL);
        else
          return false;
        return true;
      },
      "user (default) or model");
  cmd->add_option(
      "--limit",
      [o](const CLI::results_t& r) {
        o->q.set_limit(std::stoi(r[0]));
        return true;
      },
      "entries per board");
  cmd->add_flag("--csv", o->csv, "print CSV");
  return {cmd, [o](Session& s) -> int {
            auto lstub = v1::Leaderboard::NewStub(s.channel);
            grpc::ClientContext ctx;
            s.Prepare(&ctx);
            v1::LeaderboardAnswer a;
            grpc::Status st = lstub->Query(&ctx, o->q, &a);
            if (!st.ok()) return Fail(st, s.g);
            if (o->csv || s.g.json) {
              std::cout << (o->csv ? LeaderboardCsv(a) : ToJson(a) + "\n") << std::flush;
              return kExitOk;
            }
            for (const auto& b : a.boards()) {
              std::printf("%d %s  W=%d %s %s\n", b.problem_id(), b.problem_slug().c_str(),
                          b.world_size(), b.dtype().c_str(), b.gpu_class().c_str());
              auto row = [](const std::string& rank, const v1::LeaderboardEntry& e) {
                std::printf("  %3s %-9.3f %-12.2f %-12.2f %-16s %-20s %s%s  %s\n", rank.c_str(),
                            e.speedup(), e.candidate_median_us(), e.baseline_median_us(),
                            e.submitter().c_str(), e.model().c_str(), e.job_id().c_str(),
                            e.ranked() ? " (secret seed)" : "",
                            DescribeConfirmation(e.confirmation()).c_str());
              };
              for (const auto& e : b.entries()) row(absl::StrCat(e.rank()), e);
              for (const auto& e : b.pending()) row("-", e);
            }
            std::printf(
                "%d boards from %d ranking results (%d disqualified, %d pending confirmation, "
                "%d not confirmed)\n",
                a.boards_size(), a.ranking_results(), a.disqualified_results(), a.pending_results(),
                a.unconfirmed_results());
            return kExitOk;
          }};
}

Command AddSuite(CLI::App& app) {
  struct Options {
    v1::SuiteQuery q;
    bool csv = false;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "suite", "fast_p (p = 0, 1, 1.5, 2) and geomean speedup per model over the suite");
  AddFilterOptions(cmd, o->q.mutable_filter());
  cmd->add_option(
         "--p",
         [o](const CLI::results_t& r) {
           for (const auto& v : r) o->q.add_p(std::stod(v));
           return true;
         },
         "thresholds p (repeat)")
      ->expected(1, 16);
  cmd->add_flag("--csv", o->csv, "print CSV");
  return {cmd, [o](Session& s) -> int {
            auto lstub = v1::Leaderboard::NewStub(s.channel);
            grpc::ClientContext ctx;
            s.Prepare(&ctx);
            v1::SuiteAnswer a;
            grpc::Status st = lstub->Suite(&ctx, o->q, &a);
            if (!st.ok()) return Fail(st, s.g);
            if (o->csv || s.g.json) {
              std::cout << (o->csv ? SuiteCsv(a) : ToJson(a) + "\n") << std::flush;
              return kExitOk;
            }
            std::printf("%d tasks\n%-24s %-8s %-9s", a.tasks(), "model", "correct", "geomean");
            if (a.models_size() > 0) {
              for (const auto& f : a.models(0).fast_p()) std::printf(" fast_%-6g", f.p());
            }
            std::printf("\n");
            for (const auto& m : a.models()) {
              std::printf("%-24s %-8d %-9.3f", m.model().c_str(), m.tasks_correct(),
                          m.geomean_speedup());
              for (const auto& f : m.fast_p()) std::printf(" %-11.3f", f.fast_p());
              std::printf("\n");
            }
            return kExitOk;
          }};
}

Command AddSubmissions(CLI::App& app) {
  struct Options {
    v1::ListSubmissionsRequest r;
    bool csv = false;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("submissions", "submissions, newest first (agents: their own)");
  AddFilterOptions(cmd, o->r.mutable_filter());
  cmd->add_flag(
      "--done", [o](int64_t) { o->r.set_done_only(true); }, "finished ones only");
  cmd->add_option(
      "--limit",
      [o](const CLI::results_t& r) {
        o->r.set_limit(std::stoi(r[0]));
        return true;
      },
      "at most this many (default 1000)");
  cmd->add_flag("--csv", o->csv, "print CSV");
  return {cmd, [o](Session& s) -> int {
            auto lstub = v1::Leaderboard::NewStub(s.channel);
            grpc::ClientContext ctx;
            s.Prepare(&ctx);
            v1::ListSubmissionsAnswer a;
            grpc::Status st = lstub->ListSubmissions(&ctx, o->r, &a);
            if (!st.ok()) return Fail(st, s.g);
            if (o->csv || s.g.json) {
              std::cout << (o->csv ? SubmissionsCsv(a) : ToJson(a) + "\n") << std::flush;
              return kExitOk;
            }
            for (const auto& sub : a.submissions()) {
              std::printf("%s  %3d W=%d %-14s %-8.3f %-12s %-16s %s\n", sub.job_id().c_str(),
                          sub.problem_id(), sub.world_size(),
                          (sub.stage() == v1::DONE ? v1::Status_Name(sub.status())
                                                   : v1::Stage_Name(sub.stage()))
                              .c_str(),
                          sub.speedup(), sub.submitter().c_str(), sub.model().c_str(),
                          IsoTime(sub.created_unix_micros()).c_str());
            }
            return kExitOk;
          }};
}

Command AddHistory(CLI::App& app) {
  struct Options {
    std::string job_id;
    bool with_source = false, csv = false;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("history", "a submission's every event and its verdict");
  cmd->add_option("job_id", o->job_id)->required();
  cmd->add_flag("--source", o->with_source, "include the candidate's source (JSON)");
  cmd->add_flag("--csv", o->csv, "print CSV: one row per event");
  return {cmd, [o](Session& s) -> int {
            auto lstub = v1::Leaderboard::NewStub(s.channel);
            grpc::ClientContext ctx;
            s.Prepare(&ctx);
            v1::GetSubmissionRequest r;
            r.set_job_id(o->job_id);
            r.set_include_source(o->with_source);
            v1::Submission sub;
            grpc::Status st = lstub->GetSubmission(&ctx, r, &sub);
            if (!st.ok()) return Fail(st, s.g);
            if (o->csv || s.g.json) {
              std::cout << (o->csv ? SubmissionCsv(sub) : ToJson(sub) + "\n") << std::flush;
              return kExitOk;
            }
            const auto& rq = sub.job().request();
            std::printf("job %s: problem %d W=%d, submitter %s, model %s, agent %s%s\n",
                        sub.job().job_id().c_str(), rq.problem_id(), rq.world_size(),
                        rq.submitter().c_str(), rq.model().c_str(), rq.agent().c_str(),
                        rq.ranked()     ? ", ranked (secret seed)"
                        : rq.practice() ? ", practice"
                                        : "");
            for (const auto& e : sub.events()) {
              std::printf("  %s %-12s %s\n", IsoTime(e.unix_micros()).c_str(),
                          v1::Stage_Name(e.stage()).c_str(), e.message().c_str());
            }
            if (sub.job().stage() == v1::DONE) {
              PrintResult(sub.job().result());
              const std::string confirmation = DescribeConfirmation(sub.confirmation());
              if (!confirmation.empty()) std::printf("confirmation: %s\n", confirmation.c_str());
              std::printf("%s\n", sub.ranks()
                                      ? "ranks on the leaderboard"
                                      : ("does not rank: " + sub.not_ranked_reason()).c_str());
            }
            return kExitOk;
          }};
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
