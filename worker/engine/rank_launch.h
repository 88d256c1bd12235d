// How an evaluation's W rank processes are launched: the launcher's spec for a job folder (the
// binaries and libraries the sandbox shows, the ranks' arguments), shared by pkb-eval's own
// launches (engine.cc) and standby ranks started before their job (StartStandby, engine.h).
#ifndef PKB_WORKER_ENGINE_RANK_LAUNCH_H_
#define PKB_WORKER_ENGINE_RANK_LAUNCH_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/engine/engine.h"
#include "worker/engine/sandbox.h"
#include "worker/engine/standby.h"

namespace pkb {

// The installed paths and defaults an evaluation fills in before anything runs: pkb-rank and
// pkb-rank-group beside pkb-eval, the compile cache under $XDG_CACHE_HOME or ~/.cache.
void FillInstalledPaths(EvalOptions* o);

// The installation folder of the OpenMPI whose mpirun is `mpirun` (a path, or a name looked up on
// PATH): the folder above its bin/, after links are followed.
absl::StatusOr<std::string> MpiPrefix(const std::string& mpirun);

// How the W ranks of a run in `scratch` start: the launcher's spec, less what belongs to the job
// (its callbacks and its limit). `library`: the candidate, ready now; with `gated` it is compiled
// meanwhile and loaded once the gate says go; `await_spec`: started before the job is known
// (StandbyRanks). `sandbox` null: unsandboxed. The sandbox sees the engine's binaries and
// libraries read-only, and the job folder.
absl::StatusOr<std::unique_ptr<RankLaunch>> BuildRankLaunch(
    const EvalOptions& o, const SandboxPolicy* sandbox, int world, const std::string& backend,
    const std::string& scratch, const std::string& library, bool gated, bool await_spec);

}  // namespace pkb

#endif  // PKB_WORKER_ENGINE_RANK_LAUNCH_H_
