#include "worker/engine/engine.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/eval_spec.h"
#include "common/files.h"
#include "common/harness_version.h"
#include "common/hash.h"
#include "common/status_macros.h"
#include "problems/harness/check.h"
#include "problems/harness/inputs.h"
#include "problems/harness/registry.h"
#include "worker/engine/compiler.h"
#include "worker/engine/evaluation.h"
#include "worker/engine/gpu_probe.h"
#include "worker/engine/rank_launch.h"
#include "worker/engine/sandbox.h"
#include "worker/engine/standby.h"
#include "worker/engine/static_check.h"
#include "worker/engine/verdict.h"

namespace pkb {
namespace {

bool IsExecutableFile(const std::string& path) {
  std::error_code ec;
  return !path.empty() && std::filesystem::is_regular_file(path, ec) &&
         access(path.c_str(), X_OK) == 0;
}

}  // namespace

absl::Status CheckWorldFitsGpus(int world, int gpu_count) {
  if (gpu_count <= 0 || world <= gpu_count) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "W=", world, " needs ", world, " GPUs (one per rank), but this node has ", gpu_count,
      " usable GPU", gpu_count == 1 ? "" : "s",
      " (CUDA_VISIBLE_DEVICES applies): nothing was compiled or run; submit at W <= ", gpu_count,
      " or on a node with more GPUs"));
}

absl::Status CheckInstallation(const EvalOptions& o, const std::string& backend) {
  if (!o.baseline_only) {
    if (o.api_include_dir.empty()) {
      return absl::FailedPreconditionError(
          "the candidate API headers were not found: pkb-eval looks for include/pkb/candidate.h "
          "in the folders above its own binary; give the folder that holds pkb/candidate.h with "
          "--api-include-dir (a checkout's include/)");
    }
    std::error_code ec;
    if (!std::filesystem::is_regular_file(o.api_include_dir + "/pkb/candidate.h", ec)) {
      return absl::FailedPreconditionError(
          absl::StrCat("the candidate API headers are missing: no pkb/candidate.h in '",
                       o.api_include_dir, "'"));
    }
  }
  if (o.compile_only) return absl::OkStatus();  // no rank starts
  if (!IsExecutableFile(o.rank_binary)) {
    return absl::FailedPreconditionError(
        absl::StrCat("the rank binary '", o.rank_binary,
                     "' is missing or not executable (build the target pkb-rank; pkb-eval "
                     "looks for it beside itself)"));
  }
  if (o.sandbox != "off" && backend == "cuda" && !o.spec.functional() &&
      !IsExecutableFile(o.group_binary)) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", o.group_binary,
                     "' is missing or not executable: sandboxed GPU runs start their ranks "
                     "through pkb-rank-group (build the target pkb-rank-group; it belongs beside "
                     "pkb-rank)"));
  }
  return absl::OkStatus();
}

std::string LanguageOfSourceName(const std::string& name) {
  return absl::EndsWith(name, ".cc") || absl::EndsWith(name, ".cpp") ? "cpp" : "cuda";
}

v1::EvalSpec CompletedSpec(const EvalOptions& o) {
  v1::EvalSpec spec = o.spec;
  // A spec that does not say its language takes it from the source's name (pkb-eval's flags).
  if (spec.language().empty()) spec.set_language(LanguageOfSourceName(o.source_name));
  ApplyDefaults(&spec);
  return spec;
}

std::string JobKey(const EvalOptions& o, int problem_version) {
  if (!o.job_key.empty()) return o.job_key;
  return pkb::JobKey(CompletedSpec(o), o.source, problem_version, HarnessVersion());
}

Evaluation::Evaluation(const EvalOptions& options, const EvalEventCallback& sink)
    : start_(absl::Now()), o_(options), events_(sink), cfg_(std::make_unique<RunConfig>()) {
  o_.spec = CompletedSpec(options);
  // The spec as the ranks run it: a functional run's window is shortened in CheckJob; the job's
  // spec (and so its key) stays what was asked.
  run_ = o_.spec;
  r_.set_problem_id(run_.problem_id());
  r_.set_world_size(run_.world_size());
  r_.set_dtype(run_.dtype());
  r_.set_m(run_.m());
  r_.set_n(run_.n());
  r_.set_trials(run_.trials());
  r_.set_harness_version(HarnessVersion());
  FillInstalledPaths(&o_);
  sandbox_.bwrap = o_.bwrap;
  sandboxed_ = o_.sandbox != "off";
  // What compiles on the node as the job begins (TimedAlone); a compile-only run times nothing.
  if (!o_.compile_only) node_mark_ = NodeCompiles(o_.cache_dir + "/compiles").MarkNow();
}

Evaluation::~Evaluation() {
  if (standby_ && !standby_waited_) {
    // Adopted, then given up before they ran (RunRanks failed before its spec): their launcher
    // calls this job's hooks until it ends.
    standby_->Discard();
    (void)standby_->Wait();
  }
  JoinCompile();  // it writes into the scratch folder
  gpus_.Release();
  if (!scratch_.empty() && !o_.keep_scratch) (void)RemoveTree(scratch_);
}

v1::EvalResult Evaluation::Run() {
  for (auto stage : {&Evaluation::CheckJob, &Evaluation::OpenScratch, &Evaluation::CheckPolicy}) {
    if (std::optional<Verdict> end = (this->*stage)()) return Finish(*end);
  }
  if (!OverlapCompile()) {
    if (std::optional<Verdict> end = Compile()) return Finish(*end);
    if (o_.compile_only) return Finish(Compiled());
    if (std::optional<Verdict> end = RunRanks(/*gated=*/false)) return Finish(*end);
    if (early_) return *early_;  // given as soon as every report was in (SettleEarly)
    return Finish(Judge(ReadReports()));
  }
  StartCompile();
  std::optional<Verdict> ranks_end = RunRanks(/*gated=*/true);
  JoinCompile();
  if (early_) return *early_;
  // The compile's verdict comes first: ranks that waited for a candidate that never came say
  // nothing about it.
  if (std::optional<Verdict> end = AdoptCompile(outcome_)) return Finish(*end);
  if (ranks_end) return Finish(*ranks_end);
  return Finish(Judge(ReadReports()));
}

Verdict Evaluation::End(v1::Status status, std::string message) {
  return Verdict{status, std::move(message), -1};
}

v1::EvalResult Evaluation::Finish(const Verdict& v) {
  r_.set_status(v.status);
  r_.set_message(v.message);
  r_.set_total_seconds(absl::ToDoubleSeconds(absl::Now() - start_));
  events_.Done(r_);
  return r_;
}

std::optional<Verdict> Evaluation::CheckJob() {
  auto problem = FindProblem(run_.problem_id());
  if (!problem.ok()) return End(v1::REJECTED, std::string(problem.status().message()));
  p_ = *problem;
  r_.set_problem_slug(p_->info().slug);
  r_.set_job_key(JobKey(o_, p_->info().version));
  cfg_->m = run_.m();
  cfg_->n = run_.n();
  cfg_->world = run_.world_size();
  auto dtype = DtypeFromName(run_.dtype());
  if (!dtype.ok()) return End(v1::REJECTED, std::string(dtype.status().message()));
  cfg_->dtype = *dtype;
  absl::Status runnable = CheckRunnable(*p_, *cfg_);
  if (!runnable.ok()) return End(v1::REJECTED, std::string(runnable.message()));
  if (o_.compile_only && o_.baseline_only)
    return End(v1::REJECTED, "a compile-only run needs a submission to compile");
  if (run_.trials() < 1 || run_.iters() < 1 || run_.warmup() < 0) {
    return End(v1::REJECTED, "trials and timed iterations must be at least 1, warm-up at least 0");
  }
  if (!(run_.min_window_ms() >= 0 && run_.min_window_ms() <= 1000)) {
    return End(v1::REJECTED, absl::StrCat("min_window_ms: ", run_.min_window_ms(),
                                          " is outside 0..1000 (0: exactly the timed iterations)"));
  }
  if (run_.functional()) {
    // Correctness only: a short window (its spot checks still run) and no reference timing.
    r_.set_functional(true);
    run_.set_warmup(std::min(run_.warmup(), kFunctionalWarmup));
    run_.set_iters(std::min(run_.iters(), kFunctionalIters));
    run_.set_min_window_ms(0);
    o_.baseline = false;
    if (o_.baseline_only) return End(v1::REJECTED, "a functional run times no reference");
  }
  cpu_candidate_ = run_.language() == "cpp";
  backend_ = o_.backend;
  if (backend_ == "auto") backend_ = cpu_candidate_ ? "cpu" : "cuda";
  // What this node lacks fails the job here, before anything is compiled or started.
  if (absl::Status installed = CheckInstallation(o_, backend_); !installed.ok()) {
    return End(v1::INTERNAL,
               absl::StrCat("this node's engine is incomplete: ", installed.message()));
  }
  if (backend_ == "cuda" && !cpu_candidate_ && !o_.compile_only) {
    gpu_count_ = ProbeGpuCount(o_.rank_binary, o_.cache_dir);
    // A functional run's ranks share the GPUs there are.
    if (absl::Status fits = CheckWorldFitsGpus(run_.world_size(), gpu_count_);
        !fits.ok() && !run_.functional()) {
      return End(v1::NO_DEVICE, absl::StrCat(fits.message(),
                                             ", or ask for a functional run (correctness "
                                             "only; ranks share the GPUs)"));
    }
    if (run_.functional() && gpu_count_ > 0) {
      r_.set_gpus_used(std::min(run_.world_size(), gpu_count_));
    }
  }
  // How the ranks start: one process each (pkb-rank-group when sandboxed), or under mpirun (the
  // CPU backend, and GPU ranks that share GPUs: their judges' collectives go over MPI).
  launch_backend_ = backend_ == "cuda" && run_.functional() ? "cuda-shared" : backend_;
  under_mpirun_ = launch_backend_ != "cuda";
  return std::nullopt;
}

std::optional<Verdict> Evaluation::OpenScratch() {
  if (o_.standby) {
    if (StandbyFits()) {
      standby_ = o_.standby;
      scratch_ = standby_->scratch();
      return std::nullopt;
    }
    o_.standby->Discard();  // killed now: this job starts its own
    (void)o_.standby->Wait();
  }
  auto scratch = MakeTempDir(o_.scratch_root, "job-");
  if (!scratch.ok()) return End(v1::INTERNAL, std::string(scratch.status().message()));
  scratch_ = *scratch;
  if (sandboxed_) {
    if (absl::Status s = ProbeSandbox(sandbox_); !s.ok()) {
      return End(v1::INTERNAL,
                 absl::StrCat("refusing to run a submission unsandboxed: ", s.message()));
    }
    // The sandbox's uid must pass through the job folder to the compile folder inside it.
    std::filesystem::permissions(scratch_, std::filesystem::perms(0711));
  }
  return std::nullopt;
}

bool Evaluation::StandbyFits() {
  // Ranks near the end of their wait for a job (kStandbyLimit) are not taken: they could give
  // up while the job writes its spec.
  return OverlapCompile() && o_.standby->world() == run_.world_size() &&
         o_.standby->backend() == launch_backend_ && (o_.baseline || run_.functional()) &&
         absl::Now() - o_.standby->started() < kStandbyLimit - absl::Minutes(10) &&
         o_.standby->waiting();
}

std::optional<Verdict> Evaluation::CheckPolicy() {
  if (o_.baseline_only) return std::nullopt;
  std::vector<v1::Diagnostic> findings = CheckSource(o_.source, o_.source_name);
  if (findings.empty()) return std::nullopt;
  for (auto& d : findings) *r_.add_policy_findings() = d;
  return End(v1::REJECTED,
             absl::StrCat("the source breaks ", findings.size(),
                          " rule(s) of the candidate policy (docs/security.md); first, at line ",
                          findings[0].line(), ": ", findings[0].message()));
}

bool Evaluation::OverlapCompile() const {
  return o_.overlap_compile && !o_.baseline_only && !o_.compile_only &&
         !(backend_ == "cuda" && (cpu_candidate_ || gpu_count_ == 0));
}

v1::EvalResult RunEvaluation(const EvalOptions& options, const EvalEventCallback& sink,
                             std::string* after_verdict) {
  Evaluation evaluation(options, sink);
  v1::EvalResult r = evaluation.Run();
  if (after_verdict) *after_verdict = evaluation.after_verdict();
  return r;
}

}  // namespace pkb
