// Time behind an interface, so lease expiry and heartbeat loss are testable with a fake clock.
//
//   FakeClock clock(absl::FromUnixSeconds(1000));
//   Scheduler scheduler(&store, &clock, ...);
//   clock.Advance(absl::Seconds(30));
//   scheduler.Tick();  // leases older than the timeout are lost now
//
// Both implementations are thread-safe.
#ifndef PKB_SERVER_CLOCK_H_
#define PKB_SERVER_CLOCK_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace pkb {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() = 0;
};

class RealClock : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
};

class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start) : now_(start) {}
  absl::Time Now() override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pkb

#endif  // PKB_SERVER_CLOCK_H_
