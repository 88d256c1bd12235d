// The watch's judgement (gpu_watch.h). The watch itself runs on GPUs only: its device runs are
// in docs/benchmarks.md and the GPU corpus (tests/adversarial/gpu/run_while_stopped.cu).
#include "worker/engine/gpu_watch.h"

#include <catch2/catch.hpp>

namespace pkb {
namespace {

TEST_CASE("a watch within its limits finds nothing", "[gpu_watch]") {
  CHECK(GpuWatchFinding({12.0, 3000.0, 2.5}, "while round 1's inputs landed").empty());
  CHECK(GpuWatchFinding({kWatchStartLimitUs, 10.0, kWatchGapLimitUs}, "x").empty());
}

TEST_CASE("a watch that started late names when and how late", "[gpu_watch]") {
  const std::string f = GpuWatchFinding({1900.0, 40.0, 1.0}, "after round 3's answer");
  CHECK(f.rfind("after round 3's answer, ", 0) == 0);
  CHECK(f.find("started 1900 us after its launch") != std::string::npos);
  CHECK(f.find("up to 1 us at a time") != std::string::npos);
}

TEST_CASE("many short gaps add up to a finding", "[gpu_watch]") {
  GpuWatchReading r{20.0, 9000.0, kWatchGapLimitUs - 1};
  CHECK(GpuWatchFinding(r, "x").empty());
  r.gap_sum_us = 12 * 150.0;  // twelve pieces of 150 us, none over the limit alone
  CHECK(GpuWatchFinding(r, "x").find("1800 us in all") != std::string::npos);
}

TEST_CASE("a watch that ran out its own limit with nothing else seen is the judge's stall",
          "[gpu_watch]") {
  GpuWatchReading stalled{20.0, 60e6, 1.0};
  stalled.expired = true;
  // Not the submission's: its work would have taken turns with the watch and shown as gaps.
  CHECK(GpuWatchFinding(stalled, "x").empty());
  const std::string why = GpuWatchStall(stalled, "while round 1's inputs landed");
  CHECK(why.rfind("while round 1's inputs landed, ", 0) == 0);
  CHECK(why.find("ran out its own limit (60000000 us)") != std::string::npos);
  CHECK(why.find("the judge's own work waited on the whole device") != std::string::npos);
  // With gaps over the limits it is the submission's finding, and no stall.
  GpuWatchReading kept_off = stalled;
  kept_off.longest_gap_us = 2400;
  CHECK(GpuWatchStall(kept_off, "x").empty());
  CHECK(GpuWatchFinding(kept_off, "x").find("up to 2400 us at a time") != std::string::npos);
  // Stopped in time: neither.
  GpuWatchReading stopped{20.0, 900.0, 1.0};
  CHECK(GpuWatchStall(stopped, "x").empty());
}

TEST_CASE("a watch kept off the GPU names the longest gap", "[gpu_watch]") {
  const std::string f =
      GpuWatchFinding({8.0, 5200.0, kWatchGapLimitUs + 1}, "while round 2's inputs landed");
  CHECK(f.find("while round 2's inputs landed") != std::string::npos);
  CHECK(f.find("kept off the GPU for up to 201 us") != std::string::npos);
  CHECK(f.find("over 5200 us") != std::string::npos);
}

}  // namespace
}  // namespace pkb
