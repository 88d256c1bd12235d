#include "worker/engine/engine.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/eval_spec.h"
#include "common/files.h"
#include "common/harness_version.h"
#include "common/hash.h"
#include "common/status_macros.h"
#include "common/subprocess.h"
#include "problems/harness/check.h"
#include "problems/harness/inputs.h"
#include "problems/harness/registry.h"
#include "worker/engine/baseline_store.h"
#include "worker/engine/compiler.h"
#include "worker/engine/gpu_lock.h"
#include "worker/engine/gpu_probe.h"
#include "worker/engine/launcher.h"
#include "worker/engine/profiler.h"
#include "worker/engine/rank_launch.h"
#include "worker/engine/sandbox.h"
#include "worker/engine/standby.h"
#include "worker/engine/static_check.h"
#include "worker/engine/verdict.h"

namespace pkb {
namespace {

// A rank's report key, readable by the sandbox's uid only (it deletes the file on reading).
absl::Status WriteReportKey(const std::string& path, const std::string& key,
                            const SandboxPolicy* sandbox) {
  if (key.size() != 32) return absl::InternalError("no random bytes for the report keys");
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    return absl::InternalError(absl::StrCat("cannot create ", path, ": ", strerror(errno)));
  bool ok = write(fd, key.data(), key.size()) == static_cast<ssize_t>(key.size());
  if (ok && sandbox && geteuid() == 0) ok = fchown(fd, sandbox->uid, sandbox->gid) == 0;
  close(fd);
  if (!ok) return absl::InternalError(absl::StrCat("cannot write ", path, ": ", strerror(errno)));
  return absl::OkStatus();
}

// Events in order from whichever thread has news (the launcher's, with standby ranks).
class EventEmitter {
 public:
  explicit EventEmitter(const EvalEventCallback& sink) : sink_(sink) {}
  void Emit(v1::Stage stage, const std::string& message, int trial = -1, bool trial_ok = false) {
    std::lock_guard<std::mutex> lock(mu_);
    v1::EvalEvent e;
    e.set_sequence(++seq_);
    e.set_stage(stage);
    e.set_message(message);
    e.set_trial(trial);  // -1: not about one trial
    e.set_trial_ok(trial >= 0 && trial_ok);
    e.set_unix_micros(absl::ToUnixMicros(absl::Now()));
    if (sink_) sink_(e);
  }
  void Done(const v1::EvalResult& r) {
    std::lock_guard<std::mutex> lock(mu_);
    v1::EvalEvent e;
    e.set_sequence(++seq_);
    e.set_stage(v1::DONE);
    e.set_message(r.message());
    *e.mutable_result() = r;
    e.set_unix_micros(absl::ToUnixMicros(absl::Now()));
    if (sink_) sink_(e);
  }

 private:
  const EvalEventCallback& sink_;
  std::mutex mu_;
  int64_t seq_ = 0;  // guarded by mu_
};

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

namespace {

// One evaluation on its way through the stages, one method each: CheckJob, OpenScratch, Compile,
// RunRanks and Judge. A stage that ends the job early returns its verdict; Run finishes the
// result with the first one. What a stage leaves for the next is a member.
class Evaluation {
 public:
  Evaluation(const EvalOptions& options, const EvalEventCallback& sink)
      : start_(absl::Now()), o_(options), events_(sink) {
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
  }

  // The GPU lock is released, then the scratch folder removed, after the verdict was sent.
  ~Evaluation() {
    JoinCompile();  // it writes into the scratch folder
    gpus_.Release();
    if (!scratch_.empty() && !o_.keep_scratch) (void)RemoveTree(scratch_);
  }

  v1::EvalResult Run() {
    for (auto stage : {&Evaluation::CheckJob, &Evaluation::OpenScratch, &Evaluation::CheckPolicy}) {
      if (std::optional<Verdict> end = (this->*stage)()) return Finish(*end);
    }
    if (!OverlapCompile()) {
      if (std::optional<Verdict> end = Compile()) return Finish(*end);
      if (o_.compile_only) return Finish(Compiled());
      if (std::optional<Verdict> end = RunRanks(/*gated=*/false)) return Finish(*end);
      return Finish(Judge());
    }
    StartCompile();
    std::optional<Verdict> ranks_end = RunRanks(/*gated=*/true);
    JoinCompile();
    // The compile's verdict comes first: ranks that waited for a candidate that never came say
    // nothing about it.
    if (std::optional<Verdict> end = AdoptCompile(outcome_)) return Finish(*end);
    if (ranks_end) return Finish(*ranks_end);
    return Finish(Judge());
  }

 private:
  static Verdict End(v1::Status status, std::string message) {
    return Verdict{status, std::move(message), -1};
  }

  v1::EvalResult Finish(const Verdict& v) {
    r_.set_status(v.status);
    r_.set_message(v.message);
    r_.set_total_seconds(absl::ToDoubleSeconds(absl::Now() - start_));
    events_.Done(r_);
    return r_;
  }

  // Constraints first: nothing runs for a job that cannot, nor on a node that lacks what it needs.
  std::optional<Verdict> CheckJob() {
    auto problem = FindProblem(run_.problem_id());
    if (!problem.ok()) return End(v1::REJECTED, std::string(problem.status().message()));
    p_ = *problem;
    r_.set_problem_slug(p_->info().slug);
    r_.set_job_key(JobKey(o_, p_->info().version));
    cfg_.m = run_.m();
    cfg_.n = run_.n();
    cfg_.world = run_.world_size();
    auto dtype = DtypeFromName(run_.dtype());
    if (!dtype.ok()) return End(v1::REJECTED, std::string(dtype.status().message()));
    cfg_.dtype = *dtype;
    absl::Status runnable = CheckRunnable(*p_, cfg_);
    if (!runnable.ok()) return End(v1::REJECTED, std::string(runnable.message()));
    if (o_.compile_only && o_.baseline_only)
      return End(v1::REJECTED, "a compile-only run needs a submission to compile");
    if (run_.trials() < 1 || run_.iters() < 1 || run_.warmup() < 0) {
      return End(v1::REJECTED,
                 "trials and timed iterations must be at least 1, warm-up at least 0");
    }
    if (!(run_.min_window_ms() >= 0 && run_.min_window_ms() <= 1000)) {
      return End(v1::REJECTED,
                 absl::StrCat("min_window_ms: ", run_.min_window_ms(),
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

  // The job's folder, and the sandbox, checked before anything of the submission runs; or the
  // folder of the standby ranks (EvalOptions::standby) when they fit this job, which ProbeSandbox
  // was run for when they started.
  std::optional<Verdict> OpenScratch() {
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

  // Standby ranks fit a job that starts its ranks while the source compiles (they wait for a
  // gate), at their W and launch backend, with the baseline as its spec says.
  bool StandbyFits() {
    // Ranks near the end of their wait for a job (kStandbyLimit) are not taken: they could give
    // up while the job writes its spec.
    return OverlapCompile() && o_.standby->world() == run_.world_size() &&
           o_.standby->backend() == launch_backend_ && (o_.baseline || run_.functional()) &&
           absl::Now() - o_.standby->started() < kStandbyLimit - absl::Minutes(10) &&
           o_.standby->waiting();
  }

  // The source policy on what a candidate may call, before anything of it is compiled. Its
  // findings are the policy's, not the compiler's: nothing was compiled.
  std::optional<Verdict> CheckPolicy() {
    if (o_.baseline_only) return std::nullopt;
    std::vector<v1::Diagnostic> findings = CheckSource(o_.source, o_.source_name);
    if (findings.empty()) return std::nullopt;
    for (auto& d : findings) *r_.add_policy_findings() = d;
    return End(v1::REJECTED,
               absl::StrCat("the source breaks ", findings.size(),
                            " rule(s) of the candidate policy (docs/security.md); first, at line ",
                            findings[0].line(), ": ", findings[0].message()));
  }

  // Whether the ranks may start while the source compiles: they will start at all (not for a
  // compile-only run, nor where the compile is followed by NO_DEVICE or REJECTED), and the job
  // did not ask for the stages one after the other.
  bool OverlapCompile() const {
    return o_.overlap_compile && !o_.baseline_only && !o_.compile_only &&
           !(backend_ == "cuda" && (cpu_candidate_ || gpu_count_ == 0));
  }

  // The compiler (sandboxed, cached), then the library placed where the ranks load it. Touches
  // nothing of the result: it may run on a thread of its own while the ranks start (RunRanks).
  struct CompileOutcome {
    absl::StatusOr<CompileOutput> compiled = absl::UnknownError("not compiled");
    absl::Status placed;  // the library copied into the job's folder
  };
  CompileOutcome CompileSource(bool place) const {
    CompilerOptions co;
    co.gencode = o_.gencode;
    co.api_include_dir = o_.api_include_dir;
    co.torch_include_dir = o_.torch_include_dir;
    co.cpu_include_dirs = o_.cpu_include_dirs;
#ifdef PKB_MPI_INCLUDE_DIRS
    for (absl::string_view d : absl::StrSplit(PKB_MPI_INCLUDE_DIRS, ':')) {
      co.cpu_include_dirs.emplace_back(d);
    }
#endif
    co.cache_dir = o_.cache_dir;
    co.scratch_dir = scratch_;
    co.timeout = o_.compile_timeout;
    if (sandboxed_) co.sandbox = &sandbox_;
    CompileOutcome out;
    out.compiled = CandidateCompiler(co).Compile(o_.source, o_.source_name);
    if (place && out.compiled.ok() && out.compiled->report.ok()) {
      out.placed = PlaceLibrary(out.compiled->library_path);
    }
    return out;
  }

  // The ranks load the candidate from the job's own folder: a library from the compile cache,
  // which holds other submissions too, is copied there; one compiled there is moved.
  absl::Status PlaceLibrary(const std::string& compiled) const {
    std::error_code ec;
    if (absl::StartsWith(compiled, scratch_ + "/")) {
      std::filesystem::rename(compiled, CandidateLibrary(), ec);
    } else {
      std::filesystem::copy_file(compiled, CandidateLibrary(),
                                 std::filesystem::copy_options::overwrite_existing, ec);
    }
    if (ec) return absl::InternalError("cannot place the compiled candidate: " + ec.message());
    return absl::OkStatus();
  }
  std::string CandidateLibrary() const { return scratch_ + "/candidate.so"; }
  std::string CandidateGate() const { return scratch_ + "/candidate.gate"; }

  // The compile's outcome in the result, and the verdict when it ends the job.
  std::optional<Verdict> AdoptCompile(const CompileOutcome& c) {
    if (!c.compiled.ok()) return End(v1::INTERNAL, std::string(c.compiled.status().message()));
    *r_.mutable_compile() = c.compiled->report;
    (*r_.mutable_stage_seconds())["compile"] = c.compiled->report.seconds();
    if (!c.compiled->report.ok()) {
      int errors = 0;
      for (const auto& d : c.compiled->report.diagnostics()) errors += d.severity() == "error";
      return End(v1::COMPILE_ERROR,
                 absl::StrCat("compilation failed with ", errors, " error(s)", errors ? ": " : "",
                              errors ? c.compiled->report.diagnostics(0).message() : ""));
    }
    if (!c.placed.ok()) return End(v1::INTERNAL, std::string(c.placed.message()));
    library_path_ = CandidateLibrary();
    return std::nullopt;
  }

  // The compile, one stage after the other (compile-only runs, runs that start no rank, and
  // --serial-compile): the library the ranks will load, or the verdict that ends the job.
  std::optional<Verdict> Compile() {
    if (!o_.baseline_only) {
      events_.Emit(v1::COMPILING, "compiling " + o_.source_name);
      // A compile-only run loads nothing: its library stays where the compiler left it.
      if (std::optional<Verdict> end = AdoptCompile(CompileSource(!o_.compile_only))) return end;
    }
    return AfterCompile();
  }

  // What ends a job that compiled before any rank starts.
  std::optional<Verdict> AfterCompile() {
    if (o_.compile_only) return std::nullopt;  // Run ends with Compiled()
    if (backend_ == "cuda" && cpu_candidate_) {
      return End(v1::REJECTED,
                 "a .cc candidate is a CPU test candidate; GPU runs need a .cu source");
    }
    if (backend_ == "cuda" && gpu_count_ == 0) {
      r_.set_gpu("none");
      return End(v1::NO_DEVICE,
                 "compiled successfully, but this machine has no usable GPU: nothing was run, so "
                 "there is no verdict on correctness or speed");
    }
    return std::nullopt;
  }

  // The compile on a thread of its own while RunRanks starts the ranks, which wait for its gate
  // file before they load the candidate: "go" once the library is in place, "abort" otherwise.
  // Their process start, libtorch, device and communicator set-up are off the critical path.
  void StartCompile() {
    events_.Emit(v1::COMPILING, "compiling " + o_.source_name);
    compile_thread_ = std::thread([this] {
      CompileOutcome c = CompileSource(/*place=*/true);
      const bool go = c.compiled.ok() && c.compiled->report.ok() && c.placed.ok();
      {
        // Done before the gate file exists: a launcher that still found the compile running
        // knows that no rank could have loaded the candidate yet (Judge).
        std::lock_guard<std::mutex> lock(compile_mu_);
        outcome_ = std::move(c);
        compiled_ = true;
      }
      absl::Status gate = WriteFileAtomic(CandidateGate(), go ? "go\n" : "abort\n");
      if (!gate.ok() && go) {
        // The ranks wait for a gate that never comes, until their limit: the job is INTERNAL.
        std::lock_guard<std::mutex> lock(compile_mu_);
        outcome_.placed = gate;
      }
    });
  }

  // Waits for the compile thread; its outcome is then in `outcome_`.
  void JoinCompile() {
    if (compile_thread_.joinable()) compile_thread_.join();
  }

  bool CompileDone() {
    std::lock_guard<std::mutex> lock(compile_mu_);
    return compiled_;
  }

  // Whether the compile is over and gave no library to load.
  bool CompileFailed() {
    std::lock_guard<std::mutex> lock(compile_mu_);
    return compiled_ &&
           !(outcome_.compiled.ok() && outcome_.compiled->report.ok() && outcome_.placed.ok());
  }

  // The verdict of a compile-only run that compiled: nothing ran.
  Verdict Compiled() {
    int warnings = 0;
    for (const auto& d : r_.compile().diagnostics()) warnings += d.severity() == "warning";
    return End(
        v1::COMPILED,
        absl::StrFormat("compiled %s in %.2f s%s with %d warning(s); nothing was run "
                        "(compile only)",
                        o_.source_name, r_.compile().seconds(),
                        r_.compile().cache_hit() ? " (from the compile cache)" : "", warnings));
  }

  // The W rank processes, each with its report key and the run's spec, under the node's GPU lock:
  // the standby's (pkb-eval --standby) when the job adopted them in OpenScratch, else started
  // here. `gated`: the source compiles meanwhile (StartCompile), and the ranks load it once its
  // gate says go.
  std::optional<Verdict> RunRanks(bool gated) {
    // The job's side of the launch: its limit, its gate, its progress.
    StandbyRanks::Hooks hooks;
    hooks.timeout = absl::Seconds(run_.run_timeout_s());
    if (gated) {
      // Polled by the launcher: its events come between the ranks' (one thread at a time).
      hooks.gate = [this] {
        if (!CompileDone()) return Gate::kClosed;
        std::lock_guard<std::mutex> lock(compile_mu_);
        if (!outcome_.compiled.ok() || !outcome_.compiled->report.ok() || !outcome_.placed.ok()) {
          return Gate::kCalledOff;  // a compile error comes back without waiting for the ranks
        }
        events_.Emit(
            v1::VERIFYING,
            absl::StrFormat("compiled in %.2f s; %d trials on %d rank process(es)",
                            outcome_.compiled->report.seconds(), run_.trials(), run_.world_size()));
        return Gate::kOpen;
      };
      hooks.before_cleanup = [this] { JoinCompile(); };
    }
    // Rank 0's stdout is shared with the submission: ParseProgress drops what the harness never
    // writes, so a forged line can at most announce a trial early (the verdict comes from
    // reports).
    hooks.on_progress = [this](const std::string& line) {
      std::optional<Progress> p = ParseProgress(line, run_.trials());
      if (!p) return;
      if (p->trial >= 0) {
        events_.Emit(v1::VERIFYING,
                     absl::StrCat("trial ", p->trial + 1, "/", run_.trials(),
                                  p->ok ? " correct on every rank" : " failed"),
                     p->trial, p->ok);
      } else if (p->benchmarking) {
        events_.Emit(
            v1::BENCHMARKING,
            absl::StrCat("timing candidate and baseline: ", run_.warmup(), " warm-up + ",
                         run_.iters(), " timed iterations",
                         run_.min_window_ms() > 0 ? absl::StrCat(" or more, windows of at least ",
                                                                 run_.min_window_ms(), " ms")
                                                  : ""));
      }
    };
    if (standby_ && !standby_->Adopt(hooks)) {
      // They ended on their own since OpenScratch (a rank failed to start): ranks of our own.
      standby_->Discard();
      (void)standby_->Wait();
      standby_ = nullptr;
    }
    // One evaluation at a time on a node's GPUs (gpu_lock.h), held until the verdict is out
    // (~Evaluation). Standby ranks that set up their devices early hold it already; others touch
    // no GPU before the job's spec is written, below.
    if (backend_ == "cuda" && !o_.gpus_held && !(standby_ && standby_->holds_gpus())) {
      absl::StatusOr<GpuLock> opened = GpuLock::Open(o_.cache_dir);
      if (!opened.ok()) return End(v1::INTERNAL, std::string(opened.status().message()));
      gpus_ = *std::move(opened);
      bool told = false;
      for (;;) {
        absl::StatusOr<bool> held = gpus_.TryLock();
        if (!held.ok()) return End(v1::INTERNAL, std::string(held.status().message()));
        if (*held) break;
        if (!told) {
          events_.Emit(v1::VERIFYING,
                       "waiting for this node's GPUs: another evaluation runs on them");
          told = true;
        }
        // A compile that fails meanwhile ends the wait: its verdict needs no GPU (Run adopts it).
        if (gated && CompileFailed()) return End(v1::INTERNAL, "not run: the compile failed");
        absl::SleepFor(absl::Milliseconds(10));
      }
    }
    std::unique_ptr<RankLaunch> launch;
    if (!standby_) {
      absl::StatusOr<std::unique_ptr<RankLaunch>> built = BuildRankLaunch(
          o_, sandboxed_ ? &sandbox_ : nullptr, run_.world_size(), launch_backend_, scratch_,
          gated ? CandidateLibrary() : library_path_, gated, /*await_spec=*/false);
      if (!built.ok()) return End(v1::INTERNAL, std::string(built.status().message()));
      launch = *std::move(built);
    }
    // Each rank's harness gets a key to sign its report with, in a file it reads and deletes
    // before the submission's process starts (verdict.h); then the job's spec (spec.proto), which
    // standby ranks wait for.
    report_base_ = scratch_ + "/report";
    for (int rank = 0; rank < run_.world_size(); ++rank) {
      report_keys_.push_back(MakeReportKey());
      absl::Status written = WriteReportKey(absl::StrCat(report_base_, ".key.", rank),
                                            report_keys_.back(), sandboxed_ ? &sandbox_ : nullptr);
      if (!written.ok()) return End(v1::INTERNAL, std::string(written.message()));
    }
    if (absl::Status written = WriteSpecFile(scratch_ + "/spec.binpb", run_); !written.ok()) {
      return End(v1::INTERNAL, std::string(written.message()));
    }
    if (standby_) {
      events_.Emit(gated ? v1::COMPILING : v1::VERIFYING,
                   absl::StrFormat("%d rank process(es) started %.2f s ahead of this job%s",
                                   run_.world_size(),
                                   absl::ToDoubleSeconds(absl::Now() - standby_->started()),
                                   gated ? ", waiting for the compile" : ""));
    } else if (gated) {
      events_.Emit(v1::COMPILING, absl::StrCat("starting ", run_.world_size(),
                                               " rank process(es) while the source compiles"));
    } else {
      events_.Emit(v1::VERIFYING, absl::StrCat("starting ", run_.world_size(),
                                               " rank process(es), ", run_.trials(), " trials"));
    }
    run_timeout_ = hooks.timeout;
    gated_ = gated;
    absl::StatusOr<LaunchResult> launched;
    if (standby_) {
      launched = standby_->Wait();
    } else {
      launch->spec.timeout = hooks.timeout;
      launch->spec.gate = hooks.gate;
      launch->spec.on_progress = hooks.on_progress;
      launch->spec.before_cleanup = hooks.before_cleanup;
      launched = RankLauncher().Run(launch->spec);
    }
    if (!launched.ok()) return End(v1::INTERNAL, std::string(launched.status().message()));
    launched_ = std::move(*launched);
    // Standby ranks ran before this job began: their times count from its start.
    const absl::Duration ahead = standby_
                                     ? std::max(absl::ZeroDuration(), start_ - standby_->started())
                                     : absl::ZeroDuration();
    if (standby_)
      (*r_.mutable_stage_seconds())["ranks_ahead_of_job"] = absl::ToDoubleSeconds(ahead);
    (*r_.mutable_stage_seconds())["run"] = absl::ToDoubleSeconds(launched_.elapsed - ahead);
    if (gated && launched_.before_gate >= absl::ZeroDuration()) {
      // The part of "run" that the compile hid: the ranks' start while it ran.
      (*r_.mutable_stage_seconds())["ranks_during_compile"] =
          absl::ToDoubleSeconds(std::max(absl::ZeroDuration(), launched_.before_gate - ahead));
    }
    return std::nullopt;
  }

  // The tail of a rank's log; the CPU backend has one, mpirun's.
  std::string LogTail(int rank) const {
    size_t idx = under_mpirun_ ? 0 : static_cast<size_t>(rank);
    return idx < launched_.ranks.size() ? TailOfFile(launched_.ranks[idx].log_path, 8192)
                                        : std::string();
  }

  // Every rank's signed report → the verdict; an OK one joins the node's baseline.
  Verdict Judge() {
    VerdictContext vctx;
    vctx.world = run_.world_size();
    vctx.trials = run_.trials();
    vctx.iters = run_.iters();
    vctx.max_iters = TimedIterationsCap(run_);
    vctx.baseline = o_.baseline;
    vctx.baseline_only = o_.baseline_only;
    vctx.cuda = backend_ == "cuda" && !run_.functional();  // the physical floor: not shared GPUs
    Roofline roof = p_->GetRoofline(cfg_);
    vctx.nvlink_bytes = roof.nvlink_bytes;
    vctx.hbm_bytes = roof.hbm_bytes;
    vctx.flops = roof.flops;
    vctx.collective_bytes = roof.collective_bytes;
    vctx.busbw_factor = roof.busbw_factor;
    vctx.report_keys = report_keys_;
    std::vector<std::optional<std::string>> blobs(run_.world_size());
    for (int rank = 0; rank < run_.world_size(); ++rank) {
      auto bytes = ReadFile(absl::StrCat(report_base_, ".", rank));
      if (bytes.ok()) blobs[rank] = std::move(*bytes);
    }
    ParsedReports parsed = ParseRankReports(vctx, blobs);
    const int first_failed = launched_.first_failed;
    auto first_log_tail = [&] { return LogTail(first_failed >= 0 ? first_failed : 0); };
    if (launched_.timed_out) {
      r_.set_failed_rank_log(first_log_tail());
      return End(v1::TIMEOUT, absl::StrCat("the ranks did not finish within ",
                                           absl::FormatDuration(run_timeout_), " and were killed"));
    }
    CollectRankTrials(parsed, &r_);
    if (first_failed < 0 && !parsed.malformed.empty()) {
      // Every rank exited cleanly, yet a report is not one the harness writes: the submission
      // wrote to the verdict channel.
      r_.set_failed_rank_log(first_log_tail());
      return End(v1::REJECTED,
                 absl::StrCat("tampered verdict channel: ", absl::StrJoin(parsed.malformed, "; ")));
    }
    if (!parsed.Complete() && gated_ && launched_.before_gate < absl::ZeroDuration()) {
      // Their gate never opened: nothing of the submission was loaded, the failure is ours.
      r_.set_failed_rank_log(first_log_tail());
      return End(v1::INTERNAL,
                 absl::StrCat("a rank process ended before the candidate was "
                              "loaded (",
                              launched_.Describe(first_failed >= 0 ? first_failed : 0),
                              "); nothing of the submission ran"));
    }
    if (!parsed.Complete()) {
      r_.set_failed_rank_log(first_log_tail());
      std::string who = first_failed >= 0 ? absl::StrCat("rank process ", first_failed, " ",
                                                         launched_.Describe(first_failed))
                                          : "a rank process ended without a report";
      if (under_mpirun_) who = absl::StrCat("a rank process failed (", launched_.Describe(0), ")");
      // A rank whose candidate failed says how in its report; the others were ended after it.
      for (const auto& rep : parsed.reports) {
        if (rep && rep->status() == v1::RUNTIME_ERROR) {
          r_.set_failed_rank_log(LogTail(rep->rank()));
          return End(v1::RUNTIME_ERROR, rep->message());
        }
      }
      return End(v1::RUNTIME_ERROR, absl::StrCat(who, "; the candidate crashed or faulted"));
    }
    std::vector<v1::RankReport> reports;
    for (auto& rep : parsed.reports) reports.push_back(std::move(*rep));
    Verdict v = JudgeReports(vctx, reports, &r_);
    if (v.log_rank >= 0) r_.set_failed_rank_log(LogTail(v.log_rank));
    if (run_.functional() && v.status == v1::OK) {
      v.message = absl::StrFormat(
          "functional run: correct on %d rank(s) in %d trial(s)%s; no speedup (its timings are "
          "not comparable)",
          run_.world_size(), run_.trials(),
          r_.gpus_used() > 0 ? absl::StrFormat(", sharing %d GPU(s)", r_.gpus_used()) : "");
    }
    if (v.status == v1::OK && o_.baseline && r_.baseline().wall_per_iter_us() > 0) {
      // The node's baseline: this job's measurement joins its newest ones (baseline_store.h).
      BaselineStore store(o_.cache_dir + "/baselines");
      const std::string key =
          BaselineKey(run_.problem_id(), p_->info().version, run_.world_size(), run_.m(), run_.n(),
                      run_.dtype(), run_.iters(), run_.min_window_ms(), r_.gpu(), HarnessVersion());
      absl::StatusOr<std::vector<double>> recent =
          store.Record(key, r_.baseline().wall_per_iter_us());
      if (recent.ok() && !o_.baseline_only) {
        const int have = static_cast<int>(recent->size());
        if (have < o_.settle_baseline) {
          // A thin baseline (a node's first jobs of this shape): settled first (engine.h).
          events_.Emit(
              v1::BENCHMARKING,
              absl::StrCat("settling this node's baseline: ", have, " of ", o_.settle_baseline,
                           " measurements of this reference; timing it again in fresh "
                           "processes"));
          const absl::Time t0 = absl::Now();
          EvalOptions settle = o_;
          settle.spec = run_;
          settle.gpus_held = backend_ == "cuda";
          std::string failure;
          SettleNodeBaseline(settle, o_.settle_baseline - have, &failure);
          (*r_.mutable_stage_seconds())["baseline_settle"] =
              absl::ToDoubleSeconds(absl::Now() - t0);
          if (!failure.empty()) {
            events_.Emit(v1::BENCHMARKING,
                         absl::StrCat("settling the baseline stopped (the speedup uses the "
                                      "measurements there are): ",
                                      failure));
          }
          if (absl::StatusOr<std::vector<double>> now = store.Recent(key); now.ok()) recent = now;
        }
        ApplyNodeBaseline(*recent, &r_);
        v.message = absl::StrFormat("correct on %d rank(s) in %d trial(s); speedup %.3fx",
                                    run_.world_size(), run_.trials(), r_.speedup());
      }
    }
    return v;
  }

  const absl::Time start_;
  EvalOptions o_;     // the job's spec completed, the installed paths filled in
  v1::EvalSpec run_;  // the spec the ranks run
  EventEmitter events_;
  v1::EvalResult r_;
  // CheckJob
  const Problem* p_ = nullptr;
  RunConfig cfg_;
  bool cpu_candidate_ = false;
  std::string backend_, launch_backend_;
  bool under_mpirun_ = false;
  int gpu_count_ = 0;
  // OpenScratch
  SandboxPolicy sandbox_;
  bool sandboxed_ = true;
  std::string scratch_;
  // Compile
  std::string library_path_;
  std::thread compile_thread_;  // StartCompile
  std::mutex compile_mu_;
  bool compiled_ = false;  // guarded by compile_mu_, as is outcome_
  CompileOutcome outcome_;
  // OpenScratch: the standby ranks this job adopted (not owned)
  StandbyRanks* standby_ = nullptr;
  // RunRanks
  std::string report_base_;
  std::vector<std::string> report_keys_;
  GpuLock gpus_;  // the node's GPU lock, for CUDA runs
  bool gated_ = false;
  absl::Duration run_timeout_;
  LaunchResult launched_;
};

}  // namespace

v1::EvalResult RunEvaluation(const EvalOptions& options, const EvalEventCallback& sink) {
  return Evaluation(options, sink).Run();
}

}  // namespace pkb
