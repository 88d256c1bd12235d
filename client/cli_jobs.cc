// pkb's subcommands for jobs: check, submit, watch, get, cancel, admin void-worker (cli.h).
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
#include "client/cli.h"
#include "client/exit_codes.h"
#include "common/files.h"
#include "common/leaderboard_export.h"
#include "pkb/v1/admin.grpc.pb.h"
#include "pkb/v1/evaluation.grpc.pb.h"
#include "pkb/v1/leaderboard.grpc.pb.h"
#include "worker/engine/profiler.h"

namespace pkb::cli {
namespace {

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

}  // namespace

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

}  // namespace pkb::cli
