#include "worker/engine/rank_launch.h"

#include <unistd.h>

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/files.h"
#include "common/status_macros.h"

namespace pkb {
namespace {

std::string ExeDir() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "." : p.parent_path().string();
}

std::string DefaultCacheDir() {
  if (const char* x = getenv("XDG_CACHE_HOME")) return absl::StrCat(x, "/pkb/compile");
  if (const char* h = getenv("HOME")) return absl::StrCat(h, "/.cache/pkb/compile");
  return "/tmp/pkb-cache/compile";
}

}  // namespace

absl::StatusOr<std::string> MpiPrefix(const std::string& mpirun) {
  namespace fs = std::filesystem;
  std::string path = mpirun;
  if (mpirun.find('/') == std::string::npos) {
    path.clear();
    const char* env = getenv("PATH");
    for (absl::string_view dir : absl::StrSplit(env ? env : "/usr/bin:/bin", ':')) {
      std::string candidate = absl::StrCat(dir, "/", mpirun);
      if (access(candidate.c_str(), X_OK) == 0) {
        path = candidate;
        break;
      }
    }
    if (path.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("'", mpirun,
                       "' is not on PATH: CPU runs and functional GPU runs start their ranks "
                       "with OpenMPI's mpirun (install openmpi-bin, or give --mpirun)"));
    }
  }
  std::error_code ec;
  fs::path real = fs::canonical(path, ec);
  if (ec) return absl::FailedPreconditionError(absl::StrCat("cannot resolve '", path, "'"));
  return real.parent_path().parent_path().string();
}

void FillInstalledPaths(EvalOptions* o) {
  if (o->rank_binary.empty()) o->rank_binary = ExeDir() + "/pkb-rank";
  if (o->group_binary.empty()) {
    o->group_binary =
        (std::filesystem::path(o->rank_binary).parent_path() / "pkb-rank-group").string();
  }
  if (o->cache_dir.empty()) o->cache_dir = DefaultCacheDir();
}

absl::StatusOr<std::unique_ptr<RankLaunch>> BuildRankLaunch(
    const EvalOptions& o, const SandboxPolicy* sandbox, int world, const std::string& backend,
    const std::string& scratch, const std::string& library, bool gated, bool await_spec) {
  auto launch = std::make_unique<RankLaunch>();
  LaunchSpec& spec = launch->spec;
  spec.rank_binary = o.rank_binary;
  spec.world = world;
  spec.backend = backend;
  spec.mpirun = o.mpirun;
  spec.scratch_dir = scratch;
  spec.args = {"--spec=" + scratch + "/spec.binpb", "--report=" + scratch + "/report",
               "--rendezvous=" + scratch};
  if (gated) {
    spec.args.push_back("--candidate=" + library);
    spec.args.push_back("--candidate-gate=" + scratch + "/candidate.gate");
    spec.gate_limit = o.compile_timeout + absl::Seconds(60);
    if (await_spec) spec.gate_limit += kStandbyLimit;
    spec.args.push_back(absl::StrCat("--gate-limit=", absl::ToInt64Seconds(spec.gate_limit)));
  } else if (!library.empty()) {
    spec.args.push_back("--candidate=" + library);
  }
  if (await_spec) {
    spec.args.push_back("--await-spec");
    spec.args.push_back(absl::StrCat("--await-limit=", absl::ToInt64Seconds(kStandbyLimit)));
  }
  if (!o.baseline) spec.args.push_back("--no-baseline");
  if (!o.quiet_from.empty()) {
    spec.args.push_back("--await-quiet");
    spec.answer_rank0 = true;
  }
  spec.env = {"NCCL_NVLS_ENABLE=0", "TORCH_SYMM_MEM_DISABLE_MULTICAST=1", "NVSHMEM_DISABLE_NVLS=1"};
  if (sandbox == nullptr) return launch;
  // Visible read-only: the engine's binaries, the libraries they load (libtorch, NCCL, whatever
  // travels beside them) and this submission's own library, nothing of other jobs. The
  // binaries' real folders: the sandbox binds real paths (sandbox.h).
  namespace fs = std::filesystem;
  SandboxPolicy& run_sandbox = launch->sandbox;
  run_sandbox = *sandbox;
  spec.group_binary = o.group_binary;
  run_sandbox.gpu = backend != "cpu";
  run_sandbox.gpu_minors = o.gpu_minors;
  const bool under_mpirun = backend != "cuda";
  std::vector<std::string> binaries = {o.rank_binary};
  if (under_mpirun) {
    // mpirun starts the ranks; an OpenMPI installed outside /usr is bound with its prefix.
    PKB_ASSIGN_OR_RETURN(std::string prefix, MpiPrefix(o.mpirun));
    if (!absl::StartsWith(prefix, "/usr")) run_sandbox.read_only.push_back(prefix);
  } else {
    binaries.push_back(spec.group_binary);
  }
  for (const std::string& binary : binaries) {
    std::error_code ec;
    fs::path real = fs::canonical(binary, ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("cannot resolve '", binary, "' for the sandbox: ", ec.message()));
    }
    run_sandbox.read_only.push_back(real.parent_path().string());
  }
  for (const auto& d : LoadedLibraryDirs()) run_sandbox.read_only.push_back(d);
  spec.sandbox = &run_sandbox;
  return launch;
}

absl::StatusOr<std::unique_ptr<StandbyRanks>> StartStandby(const EvalOptions& options, int world,
                                                           const std::string& backend) {
  if (world < 1) return absl::InvalidArgumentError("standby ranks need W >= 1");
  if (backend != "cuda" && backend != "cpu" && backend != "cuda-shared") {
    return absl::InvalidArgumentError(
        absl::StrCat("standby ranks: unknown backend '", backend, "' (cuda, cpu or cuda-shared)"));
  }
  EvalOptions o = options;
  FillInstalledPaths(&o);
  PKB_RETURN_IF_ERROR(CheckInstallation(o, backend == "cpu" ? "cpu" : "cuda"));
  SandboxPolicy sandbox;
  sandbox.bwrap = o.bwrap;
  const bool sandboxed = o.sandbox != "off";
  PKB_ASSIGN_OR_RETURN(std::string scratch, MakeTempDir(o.scratch_root, "job-"));
  if (sandboxed) {
    if (absl::Status s = ProbeSandbox(sandbox); !s.ok()) {
      (void)RemoveTree(scratch);
      return absl::FailedPreconditionError(
          absl::StrCat("refusing to run a submission unsandboxed: ", s.message()));
    }
    std::filesystem::permissions(scratch, std::filesystem::perms(0711));
  }
  absl::StatusOr<std::unique_ptr<RankLaunch>> launch =
      BuildRankLaunch(o, sandboxed ? &sandbox : nullptr, world, backend, scratch,
                      scratch + "/candidate.so", /*gated=*/true, /*await_spec=*/true);
  if (!launch.ok()) {
    (void)RemoveTree(scratch);
    return launch.status();
  }
  // The ranks set up their devices and world communicators while they wait (--device-early):
  // on CPU always, on GPUs only with the node's GPU lock held from now on (gpu_lock.h), which a
  // job that adopts them keeps. Without it, ranks sharing a GPU start MPI (which may make a CUDA
  // context) with the job.
  GpuLock gpus;
  bool early = backend == "cpu";
  if (backend != "cpu") {
    absl::StatusOr<GpuLock> opened = GpuLock::Open(o.cache_dir, o.gpus);
    // Another evaluation runs on the GPUs (taken for a moment's wait): these ranks wait for the
    // spec before they touch a GPU, as the job that adopts them takes the lock.
    for (int attempt = 0; opened.ok() && attempt < 50 && !early; ++attempt) {
      absl::StatusOr<bool> held = opened->TryLock();
      if (!held.ok()) break;
      early = *held;
      if (!early) absl::SleepFor(absl::Milliseconds(20));
    }
    if (early) gpus = *std::move(opened);
  }
  if (early) (*launch)->spec.args.push_back("--device-early");
  return StandbyRanks::Start(scratch, *std::move(launch), std::move(gpus));
}

}  // namespace pkb
