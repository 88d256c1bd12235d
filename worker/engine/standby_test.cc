#include "worker/engine/standby.h"

#include <unistd.h>

#include <catch2/catch.hpp>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/files.h"
#include "worker/engine/gpu_lock.h"
#include "worker/engine/rank_launch.h"

namespace pkb {
namespace {

// Real standby ranks (pkb-rank beside this test, under mpirun on the CPU backend) that set up
// their devices early, started holding a GPU lock of their own cache folder.
std::unique_ptr<StandbyRanks> EarlyRanks(const std::string& dir, const std::string& cache) {
  EvalOptions o;
  FillInstalledPaths(&o);
  o.cache_dir = cache;
  auto scratch = MakeTempDir(dir, "job-");
  REQUIRE(scratch.ok());
  auto launch = BuildRankLaunch(o, nullptr, 2, "cpu", *scratch, *scratch + "/candidate.so",
                                /*gated=*/true, /*await_spec=*/true);
  REQUIRE(launch.ok());
  (*launch)->spec.args.push_back("--device-early");
  auto lock = GpuLock::Open(cache);
  REQUIRE(lock.ok());
  REQUIRE(*lock->TryLock());
  return StandbyRanks::Start(*scratch, *std::move(launch), *std::move(lock));
}

TEST_CASE("standby ranks give the GPU lock back once set up early, unless a job adopted them",
          "[engine][standby]") {
  auto dir = MakeTempDir("/tmp/pkb-test", "standby-lock-");
  REQUIRE(dir.ok());
  const std::string cache = *dir + "/cache";
  {
    std::unique_ptr<StandbyRanks> ranks = EarlyRanks(*dir, cache);
    const absl::Time end = absl::Now() + absl::Seconds(60);
    while (ranks->holds_gpus() && absl::Now() < end) absl::SleepFor(absl::Milliseconds(20));
    REQUIRE_FALSE(ranks->holds_gpus());
    // Every rank said its set-up was done, and they still wait for their job.
    for (int r = 0; r < 2; ++r) {
      CHECK(access(absl::StrCat(ranks->scratch(), "/early.", r).c_str(), F_OK) == 0);
    }
    CHECK(ranks->waiting());
    // Another evaluation may take the GPUs meanwhile.
    auto other = GpuLock::Open(cache);
    REQUIRE(other.ok());
    CHECK(*other->TryLock());
    ranks->Discard();
    (void)ranks->Wait();
  }
  {
    // Adopted before their set-up is over: the job keeps the lock.
    std::unique_ptr<StandbyRanks> ranks = EarlyRanks(*dir, cache);
    StandbyRanks::Hooks hooks;
    hooks.gate = [] { return Gate::kClosed; };
    hooks.timeout = absl::Seconds(60);
    REQUIRE(ranks->Adopt(hooks));
    absl::SleepFor(absl::Seconds(3));  // longer than their set-up
    CHECK(ranks->holds_gpus());
    auto other = GpuLock::Open(cache);
    REQUIRE(other.ok());
    CHECK_FALSE(*other->TryLock());
    ranks->Discard();
    (void)ranks->Wait();
    ranks.reset();  // the job's end: the lock goes with them
    CHECK(*other->TryLock());
  }
  (void)RemoveTree(*dir);
}

}  // namespace
}  // namespace pkb
