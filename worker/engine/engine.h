// The evaluation engine: one submission, one problem, W rank processes → an EvalResult.
//
//   EvalOptions o;  o.problem = 1;  o.world = 4;  o.source = ...;  o.source_name = "k.cu";
//   EvalResult r = RunEvaluation(o, [](const v1::EvalEvent& e) { ... });
//
// Stages: constraint check, COMPILING (cached), VERIFYING (one event per trial), BENCHMARKING,
// DONE. Never throws; a fault of the service itself comes back as status INTERNAL.
#ifndef PKB_WORKER_ENGINE_ENGINE_H_
#define PKB_WORKER_ENGINE_ENGINE_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "pkb/v1/problem.pb.h"
#include "pkb/v1/result.pb.h"

namespace pkb {

struct EvalOptions {
  int problem = 1;
  int world = 1;
  int64_t m = 1024;
  int64_t n = 1024;
  std::string dtype = "bfloat16";
  std::string source;  // the submission's text
  std::string source_name = "candidate.cu";
  int trials = 5;
  int warmup = 500;
  int iters = 100;
  int max_sets = 128;        // cap on the timed input sets
  double l2_multiple = 3.0;  // timed input sets together exceed this many L2 caches
  int spot_checks = 3;       // timed outputs re-checked after the window
  int64_t set_offset = 0;    // secret seed offset for ranked runs (0: PKB's public seeds)
  bool baseline = true;
  bool baseline_only = false;  // no submission: time the reference alone
  // A functional run: the verdict is about correctness only (no speedup, never ranked). The W
  // rank processes may share the node's GPUs (rank r on GPU r mod G): started by mpirun, the
  // judges' collectives over host-staged MPI, and no NCCL communicator for the candidate. The
  // reference is not timed, and the candidate's window is short (kFunctionalWarmup and
  // kFunctionalIters at most): its times are not comparable with anything.
  bool functional = false;
  std::string mpirun = "mpirun";  // CPU backend and functional GPU runs
  std::string backend = "auto";   // "cuda", "cpu" (MPI + CPU test candidates), "auto"
  std::string gencode = "arch=compute_90a,code=sm_90a";
  std::string gpu_class;  // recorded in the result and the job key
  std::string cache_dir;  // compile cache; empty: $XDG_CACHE_HOME/pkb or ~/.cache/pkb
  std::string scratch_root = "/tmp/pkb";
  absl::Duration run_timeout = absl::Seconds(300);
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
};

// A functional run's timed window at most (its spot checks still apply).
inline constexpr int kFunctionalWarmup = 10;
inline constexpr int kFunctionalIters = 20;

// Receives the engine's stage events as they happen (the coordinator's EventSink is another
// thing: a watcher of a job).
using EvalEventCallback = std::function<void(const v1::EvalEvent&)>;

v1::EvalResult RunEvaluation(const EvalOptions& options, const EvalEventCallback& sink);

// Whether a CUDA job of `world` ranks fits a node with `gpu_count` usable GPUs (what
// `pkb-rank --probe` counts: CUDA_VISIBLE_DEVICES applies), one GPU per rank. OK when it fits,
// and when there is no GPU at all (the engine then compiles and answers NO_DEVICE);
// FAILED_PRECONDITION naming W and the count when the node has GPUs, but fewer than W: NCCL would
// refuse two ranks on one GPU only after every rank had started.
absl::Status CheckWorldFitsGpus(int world, int gpu_count);

// What the engine needs beside itself before anything runs: the candidate API headers (unless
// `baseline_only`), the rank binary, and for sandboxed CUDA runs pkb-rank-group. `options` has its
// installed paths filled in (RunEvaluation does it). FAILED_PRECONDITION naming the missing path
// and what provides it.
absl::Status CheckInstallation(const EvalOptions& options, const std::string& backend);

// The job key: a hash of everything that determines the result.
std::string JobKey(const EvalOptions& options, int problem_version);

// Every registered problem's spec, with layouts at W = 1, 2, 4, 8.
v1::ProblemCatalog BuildCatalog();

// A readable multi-line report of a result.
std::string FormatReport(const v1::EvalResult& r);

}  // namespace pkb

#endif  // PKB_WORKER_ENGINE_ENGINE_H_
