#include "worker/engine/baseline_store.h"

#include <catch2/catch.hpp>
#include <thread>

#include "common/files.h"
#include "pkb/v1/result.pb.h"
#include "worker/engine/verdict.h"

namespace pkb {
namespace {

TEST_CASE("the node's baseline keeps the newest measurements of each key, across processes") {
  std::string dir = *MakeTempDir("/tmp", "pkb-baselines");
  const std::string a = BaselineKey(1, 1, 1, 1024, 1024, "bfloat16", 100, 20, "H200", "h3");
  const std::string b = BaselineKey(1, 1, 2, 1024, 1024, "bfloat16", 100, 20, "H200", "h3");
  {
    BaselineStore store(dir + "/baselines");
    CHECK(*store.Record(a, 10.0) == std::vector<double>{10.0});
    CHECK(*store.Record(a, 12.5) == std::vector<double>{10.0, 12.5});
    CHECK(*store.Record(b, 7.0) == std::vector<double>{7.0});  // another W, another baseline
  }
  // A new store on the same folder (another job) sees them; concurrent writers lose nothing.
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t) {
    writers.emplace_back([&] {
      BaselineStore store(dir + "/baselines");
      for (int i = 0; i < 10; ++i) REQUIRE(store.Record(a, 11.0).ok());
    });
  }
  for (auto& w : writers) w.join();
  std::vector<double> recent = *BaselineStore(dir + "/baselines").Record(a, 9.0);
  CHECK(recent.size() == static_cast<size_t>(BaselineStore::kKeep));
  CHECK(recent.back() == 9.0);
  // Read without adding.
  CHECK(*BaselineStore(dir + "/baselines").Recent(a) == recent);
  CHECK(BaselineStore(dir + "/baselines").Recent("a key never measured")->empty());
  RemoveTree(dir).IgnoreError();
}

TEST_CASE("the speedup uses the node's median baseline, the job's own beside it") {
  v1::EvalResult r;
  r.mutable_candidate()->set_wall_per_iter_us(10);
  r.mutable_baseline()->set_wall_per_iter_us(30);  // this job's baseline: an outlier
  for (double x : {29.0, 31.0}) r.mutable_baseline()->add_round_wall_per_iter_us(x);
  r.set_speedup(3.0);
  ApplyNodeBaseline({20, 21, 19, 20, 22, 20, 30}, &r);
  CHECK(r.baseline_node_us() == 20);
  CHECK(r.baseline_node_samples() == 7);
  CHECK(r.speedup() == Approx(2.0));
  CHECK(r.speedup_in_job() == Approx(3.0));
  CHECK(r.speedup_low() >= 1.9);
  CHECK(r.speedup_high() <= 3.0);
  // Few measurements: the interval spans them and this job's rounds.
  v1::EvalResult few = r;
  few.set_speedup(3.0);
  ApplyNodeBaseline({20, 30}, &few);
  CHECK(few.speedup() == Approx(2.5));
  CHECK(few.speedup_low() == Approx(2.0));
  CHECK(few.speedup_high() == Approx(3.1));
}

}  // namespace
}  // namespace pkb
