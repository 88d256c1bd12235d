// Rank processes started ahead of their job (pkb-eval --standby): a worker starts pkb-eval before
// it has a job, pkb-eval starts W ranks for the job it expects, and they load their libraries
// (and, under mpirun, set up MPI) and spawn their candidate hosts while no job is known. They
// read nothing of a job until its spec appears in their folder. When the job
// comes and fits (the same W and backend), the evaluation adopts them; otherwise it discards
// them and starts its own. Where the engine holds the node's GPU lock for them, they also set up
// their devices and world communicators (and their hosts' own) while they wait (pkb-rank
// --device-early). Nothing is reused between jobs: every job's ranks and hosts are
// fresh processes in a fresh sandbox; only their start moved earlier.
//
//   auto standby = StandbyRanks::Start(scratch, std::move(launch));   // the launcher runs
//   ...the job arrives...
//   standby->Adopt(hooks);     // its gate, progress and limit; then write keys and spec
//   absl::StatusOr<LaunchResult> r = standby->Wait();
#ifndef PKB_WORKER_ENGINE_STANDBY_H_
#define PKB_WORKER_ENGINE_STANDBY_H_

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/engine/gpu_lock.h"
#include "worker/engine/launcher.h"
#include "worker/engine/sandbox.h"

namespace pkb {

// A launch and the sandbox it points to, kept together (LaunchSpec::sandbox is a pointer).
struct RankLaunch {
  LaunchSpec spec;
  SandboxPolicy sandbox;
};

class StandbyRanks {
 public:
  // What the job that adopts the ranks gives them: see LaunchSpec (the limit runs from the gate).
  struct Hooks {
    std::function<Gate()> gate;
    std::function<std::string(const std::string&)> on_progress;
    std::function<void()> before_cleanup;
    std::function<bool(const LaunchResult&)> settled;
    absl::Duration timeout;
  };

  // Starts `launch` on a thread of its own, in `scratch` (the job folder-to-be, removed with this
  // object unless a job adopted it). Its gate stays closed until a job adopts the ranks. `gpus`:
  // the node's GPU lock when held for ranks that set up their devices early (--device-early): it
  // is given back once every rank says its set-up is done (a file `early.<rank>` in `scratch`;
  // their contexts then sit idle, and the job that adopts them takes the lock again), or when they
  // end; a job that adopts them before that keeps it until this object goes.
  static std::unique_ptr<StandbyRanks> Start(std::string scratch,
                                             std::unique_ptr<RankLaunch> launch,
                                             GpuLock gpus = GpuLock());
  ~StandbyRanks();
  StandbyRanks(const StandbyRanks&) = delete;
  StandbyRanks& operator=(const StandbyRanks&) = delete;

  const std::string& scratch() const { return scratch_; }
  int world() const { return launch_->spec.world; }
  const std::string& backend() const { return launch_->spec.backend; }
  // When the ranks started.
  absl::Time started() const { return started_; }
  // Whether they hold the node's GPU lock (a job that adopts them while they do keeps it).
  bool holds_gpus();
  // Whether the ranks are still waiting for a job (none has adopted or discarded them, and they
  // have not ended: a rank that failed to start ends the standby).
  bool waiting();

  // The job's hooks: from now on the launcher polls its gate and passes its progress on, and the
  // job folder is the job's (it removes it). False, and nothing changes, when the ranks are no
  // longer waiting (see waiting): the job then starts its own.
  bool Adopt(Hooks hooks);
  // Not this job's, or the job that adopted them gave up before they ran: the ranks are killed
  // (the launcher's gate says kCalledOff), and Wait returns once they are gone.
  void Discard();
  // Waits for the launcher: the ranks' ends, as RankLauncher::Run reports them. Once only. Ranks
  // no job adopted give the GPU lock back here.
  absl::StatusOr<LaunchResult> Wait();

 private:
  StandbyRanks(std::string scratch, std::unique_ptr<RankLaunch> launch, GpuLock gpus);

  // Gives the GPU lock back once every rank's early set-up is done (Start's `gpus`).
  void ReleaseAfterSetUp();

  const std::string scratch_;
  std::unique_ptr<RankLaunch> launch_;
  GpuLock gpus_;                // guarded by mu_ once the threads run
  std::thread release_thread_;  // ReleaseAfterSetUp
  absl::Time started_;
  std::thread thread_;
  std::mutex mu_;
  Hooks hooks_;                                                            // guarded by mu_
  bool adopted_ = false;                                                   // guarded by mu_
  bool discarded_ = false;                                                 // guarded by mu_
  bool ended_ = false;                                                     // guarded by mu_
  bool closing_ = false;                                                   // guarded by mu_
  absl::StatusOr<LaunchResult> result_ = absl::UnknownError("not ended");  // guarded by mu_
};

}  // namespace pkb

#endif  // PKB_WORKER_ENGINE_STANDBY_H_
