// Starting the W rank processes of one evaluation and bringing them all down together.
//
// CUDA backend: W processes of pkb-rank, one per GPU, in one process group. CPU backend: one
// mpirun that starts W pkb-rank processes. Either way, a wall-clock limit kills the whole group,
// and when one rank dies the others get a grace period (they are likely blocked in a collective
// with the dead one) before they are killed too. Each rank's stderr goes to its own log file.
// Sandboxed, the W CUDA ranks share one sandbox through pkb-rank-group, which applies the grace
// and reports each rank's end on a pipe of ours; killing the sandbox kills its pid namespace.
#ifndef PKB_WORKER_ENGINE_LAUNCHER_H_
#define PKB_WORKER_ENGINE_LAUNCHER_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/engine/sandbox.h"

namespace pkb {

// What ranks started ahead of their candidate wait for (LaunchSpec::gate).
enum class Gate { kClosed, kOpen, kCalledOff };

struct LaunchResult;

struct LaunchSpec {
  std::string rank_binary;        // pkb-rank
  std::vector<std::string> args;  // common arguments of every rank
  int world = 1;
  // "cuda" (a process per rank), "cpu" or "cuda-shared" (both under mpirun; the latter: GPU ranks
  // that share GPUs, engine.h EvalOptions::functional)
  std::string backend = "cuda";
  std::string mpirun = "mpirun";
  std::string scratch_dir;  // logs and reports go here
  absl::Duration timeout = absl::Seconds(300);
  absl::Duration grace_after_failure = absl::Seconds(5);
  std::vector<std::string> env;                         // KEY=VALUE added for every rank
  // Rank 0's PKB-PROGRESS payloads. What it returns (when not empty) is written to rank 0's
  // stdin, where `answer_rank0` makes that a pipe (otherwise /dev/null: it is dropped): the judge
  // waits there for the engine's word before it times (judge.h RankOptions::await_quiet). Called
  // on the launcher's thread, which it holds meanwhile.
  std::function<std::string(const std::string&)> on_progress;
  bool answer_rank0 = false;
  // When set, the ranks run in this sandbox (its scratch is `scratch_dir`) with an allow-listed
  // environment. The CUDA backend then starts all W ranks through `group_binary`
  // (pkb-rank-group) inside one sandbox; the CPU backend wraps the mpirun.
  const SandboxPolicy* sandbox = nullptr;
  std::string group_binary;
  // Ranks started before what they run is ready (pkb-eval starts them while the source compiles,
  // and they wait for it: judge.h RankOptions::candidate_gate). Polled while the ranks run: until
  // it says kOpen, `timeout` has not started (it is read then) and `gate_limit` bounds the wait
  // instead; kCalledOff (the source did not compile) kills the ranks at once.
  std::function<Gate()> gate;
  absl::Duration gate_limit = absl::Seconds(240);
  // Called once every rank has ended (or was killed), before the processes they left behind are
  // killed and reaped (children of RunSubprocess are never taken for those, common/subprocess.h):
  // in-process work of the caller that runs processes of its own (the compile)
  // finishes first, so that none of them is taken for an orphan of the ranks.
  std::function<void()> before_cleanup;
  // Polled every few milliseconds once the gate is open (or from the start, without one), while
  // no rank has failed and the limit has not passed: true once the caller has taken the run's
  // outcome from what the ranks left before their end (every rank's report, say). It is not
  // polled again, and the launcher goes on as before: it waits for the ranks' end, kills them at
  // the limit, and returns their exits. `so_far`: the run until now, with every rank's log path
  // (`ranks` has one entry per rank, mpirun's one under mpirun).
  std::function<bool(const LaunchResult& so_far)> settled;
};

struct RankExit {
  int rank = 0;
  int exit_code = -1;
  int term_signal = 0;
  std::string log_path;
};

struct LaunchResult {
  bool timed_out = false;
  bool called_off = false;      // the gate said kCalledOff and the ranks were killed
  std::vector<RankExit> ranks;  // CPU backend: one entry, the mpirun
  absl::Duration elapsed;
  // With a gate: how long the ranks ran before it opened or called the run off; -1 s when it
  // did neither.
  absl::Duration before_gate = absl::ZeroDuration();
  int first_failed = -1;  // index into ranks of the first to fail, -1 if none
  bool settled = false;   // LaunchSpec::settled said true before the ranks ended
  std::string Describe(int index) const;
};

class RankLauncher {
 public:
  // Runs the ranks to completion, failure or the limit. An error status means they could not
  // be started.
  absl::StatusOr<LaunchResult> Run(const LaunchSpec& spec);
};

// The last `max_bytes` of a file (rank logs in reports).
std::string TailOfFile(const std::string& path, size_t max_bytes);

}  // namespace pkb

#endif  // PKB_WORKER_ENGINE_LAUNCHER_H_
