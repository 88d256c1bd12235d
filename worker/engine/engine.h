// The evaluation engine: one submission, one problem, W rank processes → an EvalResult.
//
//   EvalOptions o;  o.spec.set_problem_id(1);  o.spec.set_world_size(4);  o.source = ...;
//   EvalResult r = RunEvaluation(o, [](const v1::EvalEvent& e) { ... });
//
// Stages: constraint check, COMPILING (cached), VERIFYING (one event per trial), BENCHMARKING,
// DONE (with compile_only: constraint check, COMPILING, DONE). Never throws; a fault of the service
// itself comes back as status INTERNAL.
#ifndef PKB_WORKER_ENGINE_ENGINE_H_
#define PKB_WORKER_ENGINE_ENGINE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pkb/v1/problem.pb.h"
#include "pkb/v1/result.pb.h"
#include "pkb/v1/spec.pb.h"

namespace pkb {

class StandbyRanks;  // standby.h

// One evaluation: the job's spec (what is evaluated, how: spec.proto) and what is local to this
// run (the source, paths, the sandbox). RunEvaluation completes the spec with ApplyDefaults.
struct EvalOptions {
  v1::EvalSpec spec;
  // The job key the coordinator computed (Lease.job_key); empty: computed here from the spec,
  // with the same function (common/eval_spec.h).
  std::string job_key;
  std::string source;  // the submission's text
  std::string source_name = "candidate.cu";
  bool baseline = true;
  bool baseline_only = false;  // no submission: time the reference alone
  // Stop after the compile (pkb-eval --compile-only, the worker's compile task): the same
  // constraints, source policy and sandboxed, cached compile as a run, then status COMPILED (or
  // the verdict that stopped it: REJECTED, COMPILE_ERROR, ...). No rank starts, no GPU is
  // counted or locked, and pkb-rank need not be installed.
  bool compile_only = false;
  // Start the rank processes while the source compiles (they load it once it is ready), so that
  // their start, libtorch, device and communicator set-up cost no time after the compile. False:
  // compile, then start them (pkb-eval --serial-compile; for measuring the difference).
  bool overlap_compile = true;
  std::string mpirun = "mpirun";  // CPU backend and functional GPU runs
  std::string backend = "auto";   // "cuda", "cpu" (MPI + CPU test candidates), "auto"
  std::string gencode = "arch=compute_90a,code=sm_90a";
  std::string cache_dir;  // compile cache; empty: $XDG_CACHE_HOME/pkb or ~/.cache/pkb
  std::string scratch_root = "/tmp/pkb";
  absl::Duration compile_timeout = absl::Seconds(180);
  bool keep_scratch = false;
  // Installed layout: where pkb-rank, include/ and the torch headers are.
  std::string rank_binary;
  std::string api_include_dir;
  std::string torch_include_dir;
  std::vector<std::string> cpu_include_dirs;  // for CPU test candidates (.cc)
  // The sandbox around the compiler and the ranks (worker/engine/sandbox.h): "on" (the default:
  // a job fails with INTERNAL when it cannot be built) or "off" (trusted sources only).
  std::string sandbox = "on";
  std::string bwrap = "bwrap";
  std::string group_binary;  // pkb-rank-group; default: beside rank_binary
  // Ranks started ahead of this job (StartStandby; not owned): adopted when they fit (the same W
  // and launch backend, a run that compiles while its ranks start), else discarded.
  StandbyRanks* standby = nullptr;
  // Settle the node's baseline (baseline_store.h) before the speedup is computed: while it holds
  // fewer than this many measurements of the job's reference, the reference is timed again in
  // fresh rank processes, as jobs of their own would (SettleNodeBaseline). The eager reference's
  // figure differs between processes by tens of percent, so a node's first jobs of a shape
  // would otherwise score against the median of a few. 0: off (each job adds its one).
  int settle_baseline = 0;
  // The node's baseline leaves out measurements older than this (baseline_store.h); a key whose
  // measurements aged out is settled again (settle_baseline).
  absl::Duration baseline_max_age = absl::Hours(24);
  // The caller holds the node's GPU lock already (a settling run inside a job's evaluation).
  bool gpus_held = false;
  // A share of the node's GPUs (pkb-eval --gpus; gpu_select.h): their UUIDs (also in
  // CUDA_VISIBLE_DEVICES, set by pkb-eval) and device minors, whose nodes alone the sandbox binds.
  // The GPU lock is then theirs (gpu_lock.h). Empty: the whole node.
  std::vector<std::string> gpus;
  std::vector<int> gpu_minors;
  // The worker's word that the job may be timed (common/quiet_word.h), a FIFO it made: once rank
  // 0 says it will time, the engine waits (kQuietWait at most) for the worker to say, there, that
  // its other work is stopped and how much of it ran beside the job (EvalResult.compiles_beside),
  // then gives rank 0 its word (judge.h RankOptions::await_quiet), which the judges wait for.
  // Only a job timed after a word of none beside it, and beside which no other compile ran on
  // the node (node_compiles.h), adds to the node's baseline store. Empty: nobody is asked
  // (pkb-eval run alone; the node's compiles are still counted).
  std::string quiet_from;
};

// The longest the engine waits for the worker's word to time (EvalOptions::quiet_from); without
// it the job is timed all the same, and its compiles_beside is -1.
inline constexpr absl::Duration kQuietWait = absl::Seconds(2);

// How many measurements a node's baseline needs before a speedup against it reproduces (within
// ±3.5% over 11-14 on an H100, ±12% over 6-10: docs/benchmarks.md, 2026-12-05); the worker's
// default EvalOptions::settle_baseline.
inline constexpr int kSettledBaseline = 10;

// Reference-only evaluations of `job` (its spec; no submission), `runs` of them one after the
// other, each in fresh rank processes and a fresh sandbox, each adding its measurement to the
// node's baseline. For a job's own evaluation, which holds the GPU lock (`job.gpus_held` says so
// for CUDA). Stops at the first run that is not OK or that a compile ran beside (another
// worker's: its measurement did not join). Returns how many ended OK alone, and in `failure` why
// it stopped.
int SettleNodeBaseline(const EvalOptions& job, int runs, std::string* failure);

// A functional run (spec.functional: correctness only, no speedup, never ranked) lets the W rank
// processes share the node's GPUs (rank r on GPU r mod G): started by mpirun, the judges'
// collectives over host-staged MPI, and no NCCL communicator for the candidate. The reference is
// not timed, and the candidate's window is at most this short (its spot checks still apply): its
// times are not comparable with anything. The warm-up's outputs are never checked, and with no
// window to size it times nothing: two calls, one of each of the host's loops (plain and
// deferred). Where eight ranks time-slice one GPU a call takes about 37 ms (H200).
inline constexpr int kFunctionalWarmup = 2;
inline constexpr int kFunctionalIters = 20;

// How long standby ranks wait for their job before they give up (their launcher's limit too).
inline constexpr absl::Duration kStandbyLimit = absl::Hours(1);

// Starts `world` rank processes for a job not known yet (pkb-eval --standby): in a job folder of
// their own under options.scratch_root, in the sandbox, with `backend` the launch's ("cuda": a
// process per GPU; "cpu" and "cuda-shared": under mpirun). They load their libraries and spawn
// their candidate hosts, then wait for the job's spec; RunEvaluation with EvalOptions::standby
// adopts them. The sandbox is probed here, so a job that adopts them does not probe it again.
absl::StatusOr<std::unique_ptr<StandbyRanks>> StartStandby(const EvalOptions& options, int world,
                                                           const std::string& backend);

// Receives the engine's stage events as they happen (the coordinator's EventSink is another
// thing: a watcher of a job).
using EvalEventCallback = std::function<void(const v1::EvalEvent&)>;

// The verdict is given (DONE) once every rank's report is in, while the rank processes still end;
// RunEvaluation returns once they have. Where they then failed (one died, or the limit passed),
// the verdict stands, and `after_verdict` (when given) says what happened: the node's GPU may
// need a check.
v1::EvalResult RunEvaluation(const EvalOptions& options, const EvalEventCallback& sink,
                             std::string* after_verdict = nullptr);

// Whether a CUDA job of `world` ranks fits a node with `gpu_count` usable GPUs (what
// `pkb-rank --probe` counts: CUDA_VISIBLE_DEVICES applies), one GPU per rank. OK when it fits,
// and when there is no GPU at all (the engine then compiles and answers NO_DEVICE);
// FAILED_PRECONDITION naming W and the count when the node has GPUs, but fewer than W: NCCL would
// refuse two ranks on one GPU only after every rank had started.
absl::Status CheckWorldFitsGpus(int world, int gpu_count);

// What the engine needs beside itself before anything runs: the candidate API headers (unless
// `baseline_only`), the rank binary, and for sandboxed CUDA runs pkb-rank-group (neither binary
// for `compile_only`). `options` has its
// installed paths filled in (RunEvaluation does it). FAILED_PRECONDITION naming the missing path
// and what provides it.
absl::Status CheckInstallation(const EvalOptions& options, const std::string& backend);

// "cpp" for a CPU test candidate's file name (.cc, .cpp), else "cuda" (EvalSpec.language).
std::string LanguageOfSourceName(const std::string& name);

// `options.spec` completed: its language from the source's name where it says none, then
// ApplyDefaults. RunEvaluation runs this spec.
v1::EvalSpec CompletedSpec(const EvalOptions& options);

// The job key of `options` (of CompletedSpec): options.job_key when the
// coordinator gave one, else the hash of the spec (common/eval_spec.h).
std::string JobKey(const EvalOptions& options, int problem_version);

// Every registered problem's spec, with layouts at W = 1, 2, 4, 8.
v1::ProblemCatalog BuildCatalog();

// A readable multi-line report of a result.
std::string FormatReport(const v1::EvalResult& r);

}  // namespace pkb

#endif  // PKB_WORKER_ENGINE_ENGINE_H_
