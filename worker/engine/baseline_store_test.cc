#include "worker/engine/baseline_store.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
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

TEST_CASE("the node's baseline leaves out measurements older than its age limit") {
  std::string dir = *MakeTempDir("/tmp", "pkb-baselines");
  const std::string a = BaselineKey(1, 1, 1, 1024, 1024, "bfloat16", 100, 20, "H200", "h3");
  absl::Time now = absl::FromUnixSeconds(1'800'000'000);  // the test's clock
  auto clock = [&] { return now; };
  BaselineStore store(dir + "/baselines", absl::Hours(24), clock);
  CHECK(*store.Record(a, 10.0) == std::vector<double>{10.0});
  now += absl::Hours(12);
  CHECK(*store.Record(a, 11.0) == std::vector<double>{10.0, 11.0});
  now += absl::Hours(13);  // the first is 25 hours old
  CHECK(*store.Recent(a) == std::vector<double>{11.0});
  CHECK(*store.Record(a, 12.0) == std::vector<double>{11.0, 12.0});
  // Another limit on the same files (pkb-eval --baseline-max-age-hours).
  CHECK(*BaselineStore(dir + "/baselines", absl::Hours(48), clock).Recent(a) ==
        std::vector<double>{10.0, 11.0, 12.0});
  now += absl::Hours(30);
  CHECK(store.Recent(a)->empty());  // all aged out: the node measures it again
  // A line without a time, as a store wrote before measurements had one: aged out.
  const std::string legacy = BaselineKey(2, 1, 1, 1024, 1024, "bfloat16", 100, 20, "H200", "h3");
  REQUIRE(store.Record(legacy, 5.0).ok());
  for (const auto& f : std::filesystem::directory_iterator(dir + "/baselines")) {
    auto text = ReadFile(f.path().string());
    REQUIRE(text.ok());
    if (text->rfind("5 ", 0) == 0)
      REQUIRE(WriteFileAtomic(f.path().string(), "7\n5 " + text->substr(2)).ok());
  }
  CHECK(*store.Recent(legacy) == std::vector<double>{5.0});
  // Dated ahead (the clock set back since): left out.
  now -= absl::Hours(3);
  CHECK(store.Recent(legacy)->empty());
  now += absl::Hours(3);
  // The file is cut to its newest kKeep lines once it holds kCompactAt; nothing recent is lost.
  for (int i = 0; i < BaselineStore::kCompactAt + 3; ++i) {
    now += absl::Seconds(1);
    REQUIRE(store.Record(a, 20.0 + i).ok());
  }
  std::vector<double> recent = *store.Recent(a);
  CHECK(recent.size() == static_cast<size_t>(BaselineStore::kKeep));
  CHECK(recent.back() == 20.0 + BaselineStore::kCompactAt + 2);
  int lines = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir + "/baselines")) {
    auto text = ReadFile(f.path().string());
    REQUIRE(text.ok());
    lines = std::max(lines, static_cast<int>(std::count(text->begin(), text->end(), '\n')));
  }
  CHECK(lines < BaselineStore::kCompactAt);
  CHECK(lines >= BaselineStore::kKeep);
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
