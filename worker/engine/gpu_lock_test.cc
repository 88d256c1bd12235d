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

TEST_CASE(
    "shares of the node's GPUs: disjoint ones at once, overlapping ones and the whole node "
    "one at a time",
    "[engine][gpu_lock]") {
  auto dir = MakeTempDir("/tmp/pkb-test", "gpu-share-");
  REQUIRE(dir.ok());
  const std::string cache = *dir + "/cache";
  const std::string g0 = "GPU-00000000-0000-0000-0000-000000000000";
  const std::string g1 = "GPU-11111111-1111-1111-1111-111111111111";
  const std::string g2 = "GPU-22222222-2222-2222-2222-222222222222";
  auto a = GpuLock::Open(cache, {g0});
  auto b = GpuLock::Open(cache, {g2, g1});
  auto c = GpuLock::Open(cache, {g1});
  auto node = GpuLock::Open(cache);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  REQUIRE(c.ok());
  REQUIRE(node.ok());
  CHECK(*a->TryLock());
  CHECK(*b->TryLock());      // disjoint from a
  CHECK(!*c->TryLock());     // g1 is b's
  CHECK(!*node->TryLock());  // the whole node waits for every share
  b->Release();
  CHECK(*c->TryLock());
  // A share that cannot have all of its GPUs holds none of them: g2 stays free.
  auto d = GpuLock::Open(cache, {g1, g2});
  REQUIRE(d.ok());
  CHECK(!*d->TryLock());
  auto e = GpuLock::Open(cache, {g2});
  REQUIRE(e.ok());
  CHECK(*e->TryLock());
  a->Release();
  c->Release();
  e->Release();
  // Held by the whole node, no share is taken; moved, it stays held.
  CHECK(*node->TryLock());
  GpuLock kept = *std::move(node);
  CHECK(kept.held());
  CHECK(!*d->TryLock());
  kept.Release();
  CHECK(*d->TryLock());
  (void)RemoveTree(*dir);
}

}  // namespace
}  // namespace pkb
