// The evaluation's stages (engine.h RunEvaluation): one object per job, its methods the stages,
// defined in engine.cc (the job's checks and its folder), engine_compile.cc (the compile) and
// engine_ranks.cc (the rank processes and the verdict). Internal to the engine.
#ifndef PKB_WORKER_ENGINE_EVALUATION_H_
#define PKB_WORKER_ENGINE_EVALUATION_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/quiet_word.h"
#include "pkb/v1/result.pb.h"
#include "pkb/v1/spec.pb.h"
#include "worker/engine/compiler.h"
#include "worker/engine/engine.h"
#include "worker/engine/gpu_lock.h"
#include "worker/engine/launcher.h"
#include "worker/engine/node_compiles.h"
#include "worker/engine/sandbox.h"
#include "worker/engine/verdict.h"

namespace pkb {

class Problem;       // problems/harness/problem.h
struct RunConfig;    // problems/harness/problem.h
class StandbyRanks;  // standby.h

// Events in order from whichever thread has news (the launcher's, with standby ranks).
class EventEmitter {
 public:
  explicit EventEmitter(const EvalEventCallback& sink) : sink_(sink) {}
  // Nothing after the DONE (a progress line the ranks wrote before their reports, read after).
  void Emit(v1::Stage stage, const std::string& message, int trial = -1, bool trial_ok = false) {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
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
    done_ = true;
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
  int64_t seq_ = 0;    // guarded by mu_
  bool done_ = false;  // guarded by mu_
};

// One evaluation on its way through the stages, one method each: CheckJob, OpenScratch, Compile,
// RunRanks and Judge. A stage that ends the job early returns its verdict; Run finishes the
// result with the first one. What a stage leaves for the next is a member.
class Evaluation {
 public:
  Evaluation(const EvalOptions& options, const EvalEventCallback& sink);

  // The GPU lock is released, then the scratch folder removed, after the verdict was sent.
  ~Evaluation();

  v1::EvalResult Run();

  // After a verdict given before the ranks ended (SettleEarly): how they then failed, if they did.
  const std::string& after_verdict() const { return after_verdict_; }

 private:
  static Verdict End(v1::Status status, std::string message);

  v1::EvalResult Finish(const Verdict& v);

  // Constraints first: nothing runs for a job that cannot, nor on a node that lacks what it needs.
  std::optional<Verdict> CheckJob();

  // The job's folder, and the sandbox, checked before anything of the submission runs; or the
  // folder of the standby ranks (EvalOptions::standby) when they fit this job, which ProbeSandbox
  // was run for when they started.
  std::optional<Verdict> OpenScratch();

  // Standby ranks fit a job that starts its ranks while the source compiles (they wait for a
  // gate), at their W and launch backend, with the baseline as its spec says.
  bool StandbyFits();

  // The source policy on what a candidate may call, before anything of it is compiled. Its
  // findings are the policy's, not the compiler's: nothing was compiled.
  std::optional<Verdict> CheckPolicy();

  // Whether the ranks may start while the source compiles: they will start at all (not for a
  // compile-only run, nor where the compile is followed by NO_DEVICE or REJECTED), and the job
  // did not ask for the stages one after the other.
  bool OverlapCompile() const;

  // The compiler (sandboxed, cached), then the library placed where the ranks load it. Touches
  // nothing of the result: it may run on a thread of its own while the ranks start (RunRanks).
  struct CompileOutcome {
    absl::StatusOr<CompileOutput> compiled = absl::UnknownError("not compiled");
    absl::Status placed;  // the library copied into the job's folder
  };
  CompileOutcome CompileSource(bool place) const;

  // The ranks load the candidate from the job's own folder: a library from the compile cache,
  // which holds other submissions too, is copied there; one compiled there is moved.
  absl::Status PlaceLibrary(const std::string& compiled) const;
  std::string CandidateLibrary() const { return scratch_ + "/candidate.so"; }
  std::string CandidateGate() const { return scratch_ + "/candidate.gate"; }

  // The compile's outcome in the result, and the verdict when it ends the job.
  std::optional<Verdict> AdoptCompile(const CompileOutcome& c);

  // The compile, one stage after the other (compile-only runs, runs that start no rank, and
  // --serial-compile): the library the ranks will load, or the verdict that ends the job.
  std::optional<Verdict> Compile();

  // What ends a job that compiled before any rank starts.
  std::optional<Verdict> AfterCompile();

  // The compile on a thread of its own while RunRanks starts the ranks, which wait for its gate
  // file before they load the candidate: "go" once the library is in place, "abort" otherwise.
  // Their process start, libtorch, device and communicator set-up are off the critical path.
  void StartCompile();

  // Waits for the compile thread; its outcome is then in `outcome_`.
  void JoinCompile();

  bool CompileDone();

  // Whether the compile is over and gave no library to load.
  bool CompileFailed();

  // The verdict of a compile-only run that compiled: nothing ran.
  Verdict Compiled();

  // The W rank processes, each with its report key and the run's spec, under the node's GPU lock:
  // the standby's (pkb-eval --standby) when the job adopted them in OpenScratch, else started
  // here. `gated`: the source compiles meanwhile (StartCompile), and the ranks load it once its
  // gate says go.
  std::optional<Verdict> RunRanks(bool gated);

  // The launch's stages in the result (run, ranks_ahead_of_job, job_before_spec,
  // ranks_during_compile), from `launched_`.
  void NoteLaunch();

  // Rank 0 says it is about to time (its BENCHMARKING line): where the worker is asked
  // (EvalOptions::quiet_from), waits for its word that its other work is stopped, and keeps its
  // count (compiles_beside_). The answer to rank 0, which waits for it: GoWord of its report key
  // (empty when it waits for nothing). Once per job: a second line is answered at once.
  std::string AwaitQuiet();

  // Whether the job was timed with no compile beside it: the worker said none of its own ran
  // (worker_beside_ 0), rank 0 heard the engine's word (where the worker is asked), and no compile
  // ran on the node since the job began (NodeCompiles, the job's own source's excepted). Sets
  // compiles_beside_ and compiles_beside in the result: the larger count, or -1 where rank 0 timed
  // without the word.
  bool TimedAlone(const std::vector<const v1::RankReport*>& reports);

  // The compile cache's key of the job's source; empty without one (or where it cannot be known).
  std::string OwnCompileKey();
  // How the job's source is compiled (CompileSource).
  CompilerOptions CompilerOptionsForJob() const;

  // Polled by the launcher while the ranks run (LaunchSpec::settled): once every rank's report
  // is in, signed and well formed, the verdict is given from them at once (Finish), while the
  // ranks' processes still exit; `early_` keeps it for Run. Not where the node's baseline is
  // to be settled first (that starts ranks of its own).
  bool SettleEarly(const LaunchResult& so_far);

  // What the verdict is checked against: the job's counts, roofline and report keys.
  VerdictContext MakeVerdictContext() const;

  // Each rank's report file, read as untrusted input (ReadReportFile), parsed and checked.
  ParsedReports ReadReports() const;

  // The key of this job's reference in the node's baseline store, on GPU `gpu`.
  std::string BaselineKeyFor(const std::string& gpu) const;

  // The tail of a rank's log; the CPU backend has one, mpirun's.
  std::string LogTail(int rank) const;

  // Every rank's signed report → the verdict; an OK one joins the node's baseline. `early`: given
  // before the ranks ended (SettleEarly), when the node's baseline is not settled first.
  Verdict Judge(ParsedReports parsed, bool early = false);

  // The early verdict reads report files of at most this size; larger ones wait for the ranks'
  // end (a real report is far smaller: its timings are at most one per timed iteration).
  static constexpr int64_t kMaxEarlyReportBytes = 4 << 20;

  const absl::Time start_;
  absl::Time spec_written_, ranks_ended_;  // RunRanks: the spec for the ranks, their exit
  EvalOptions o_;     // the job's spec completed, the installed paths filled in
  v1::EvalSpec run_;  // the spec the ranks run
  EventEmitter events_;
  v1::EvalResult r_;
  // CheckJob
  const Problem* p_ = nullptr;
  std::unique_ptr<RunConfig> cfg_;  // CheckJob
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
  // Its Wait has run: its launcher thread, which calls this job's hooks, is over.
  bool standby_waited_ = false;
  // RunRanks
  std::string report_base_;
  std::vector<std::string> report_keys_;
  GpuLock gpus_;  // the node's GPU lock, for CUDA runs
  bool gated_ = false;
  absl::Duration run_timeout_;
  // Set once the keys and spec are out: what RunRanks wrote before it is seen by the launcher's
  // thread (SettleEarly).
  std::atomic<bool> spec_out_{false};
  LaunchResult launched_;
  // The worker's word (AwaitQuiet), on the launcher's thread; read once the ranks' reports are in.
  std::optional<QuietListener> quiet_;
  bool quiet_asked_ = false;
  int worker_beside_ = 0;    // the worker's count, -1: no word (AwaitQuiet)
  int compiles_beside_ = 0;  // TimedAlone
  // The node's compiles as the job began (node_compiles.h), and the job's source's key.
  NodeCompiles::Mark node_mark_;
  std::optional<int> node_beside_;  // TimedAlone
  std::optional<std::string> own_compile_key_;
  // SettleEarly: the report files as last tried (inode, size, mtime), and the verdict it gave.
  std::vector<std::array<int64_t, 3>> reports_tried_;
  std::optional<v1::EvalResult> early_;
  std::string after_verdict_;
};

}  // namespace pkb

#endif  // PKB_WORKER_ENGINE_EVALUATION_H_
