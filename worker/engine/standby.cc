#include "worker/engine/standby.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/files.h"

namespace pkb {

StandbyRanks::StandbyRanks(std::string scratch, std::unique_ptr<RankLaunch> launch, GpuLock gpus)
    : scratch_(std::move(scratch)),
      launch_(std::move(launch)),
      gpus_(std::move(gpus)),
      started_(absl::Now()) {
  LaunchSpec& spec = launch_->spec;
  if (spec.sandbox) spec.sandbox = &launch_->sandbox;
  // The launcher's callbacks run on its thread and go to whichever job adopted the ranks.
  spec.gate = [this] {
    std::lock_guard<std::mutex> lock(mu_);
    if (discarded_) return Gate::kCalledOff;
    if (!adopted_ || !hooks_.gate) return Gate::kClosed;
    return hooks_.gate();
  };
  spec.on_progress = [this](const std::string& line) {
    std::lock_guard<std::mutex> lock(mu_);
    return adopted_ && hooks_.on_progress ? hooks_.on_progress(line) : std::string();
  };
  spec.settled = [this](const LaunchResult& so_far) {
    std::lock_guard<std::mutex> lock(mu_);
    return adopted_ && hooks_.settled && hooks_.settled(so_far);
  };
  spec.before_cleanup = [this] {
    std::function<void()> hook;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (adopted_) hook = hooks_.before_cleanup;
    }
    if (hook) hook();
  };
}

std::unique_ptr<StandbyRanks> StandbyRanks::Start(std::string scratch,
                                                  std::unique_ptr<RankLaunch> launch,
                                                  GpuLock gpus) {
  std::unique_ptr<StandbyRanks> s(
      new StandbyRanks(std::move(scratch), std::move(launch), std::move(gpus)));
  StandbyRanks* self = s.get();
  s->thread_ = std::thread([self] {
    absl::StatusOr<LaunchResult> r = RankLauncher().Run(self->launch_->spec);
    std::lock_guard<std::mutex> lock(self->mu_);
    self->result_ = std::move(r);
    self->ended_ = true;
  });
  if (s->gpus_.held()) s->release_thread_ = std::thread([self] { self->ReleaseAfterSetUp(); });
  return s;
}

void StandbyRanks::ReleaseAfterSetUp() {
  const int world = launch_->spec.world;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closing_ || adopted_ || discarded_ || ended_) return;  // kept, or given back by Wait
    }
    int done = 0;
    for (int r = 0; r < world; ++r) {
      done += access(absl::StrCat(scratch_, "/early.", r).c_str(), F_OK) == 0 ? 1 : 0;
    }
    if (done == world) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!adopted_) gpus_.Release();
      return;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
}

bool StandbyRanks::holds_gpus() {
  std::lock_guard<std::mutex> lock(mu_);
  return gpus_.held();
}

StandbyRanks::~StandbyRanks() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
  }
  if (release_thread_.joinable()) release_thread_.join();
  Discard();
  if (thread_.joinable()) thread_.join();
  if (!adopted_) (void)RemoveTree(scratch_);
}

bool StandbyRanks::waiting() {
  std::lock_guard<std::mutex> lock(mu_);
  return !adopted_ && !discarded_ && !ended_;
}

bool StandbyRanks::Adopt(Hooks hooks) {
  std::lock_guard<std::mutex> lock(mu_);
  if (adopted_ || discarded_ || ended_) return false;
  hooks_ = std::move(hooks);
  // Read by the launcher when the gate opens, after taking mu_ in the gate.
  launch_->spec.timeout = hooks_.timeout;
  adopted_ = true;
  return true;
}

void StandbyRanks::Discard() {
  std::lock_guard<std::mutex> lock(mu_);
  discarded_ = true;
}

absl::StatusOr<LaunchResult> StandbyRanks::Wait() {
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  if (!adopted_) gpus_.Release();  // the ranks are gone: the job that discarded them takes it
  return std::move(result_);
}

}  // namespace pkb
