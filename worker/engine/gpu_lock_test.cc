#include "worker/engine/gpu_lock.h"

#include <catch2/catch.hpp>

#include "common/files.h"

namespace pkb {
namespace {

TEST_CASE("the node's GPU lock: one holder at a time, given back when released or moved away",
          "[engine][gpu_lock]") {
  auto dir = MakeTempDir("/tmp/pkb-test", "gpu-lock-");
  REQUIRE(dir.ok());
  const std::string cache = *dir + "/cache";  // made by Open
  auto a = GpuLock::Open(cache);
  auto b = GpuLock::Open(cache);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(*a->TryLock());
  CHECK(a->held());
  CHECK(*a->TryLock());   // held already
  CHECK(!*b->TryLock());  // another open of the file: another holder-to-be, even in one process
  CHECK(!b->held());
  // Moved, the lock stays held by its new owner.
  GpuLock kept = *std::move(a);
  CHECK(kept.held());
  CHECK(!*b->TryLock());
  kept.Release();
  CHECK(!kept.held());
  CHECK(*b->TryLock());
  // Released by its destructor.
  { GpuLock gone = *std::move(b); }
  auto c = GpuLock::Open(cache);
  REQUIRE(c.ok());
  CHECK(*c->TryLock());
  // Released, it cannot be taken again through the same object.
  c->Release();
  CHECK(!c->TryLock().ok());
  (void)RemoveTree(*dir);
}

}  // namespace
}  // namespace pkb
