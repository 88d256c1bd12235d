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

TEST_CASE("a late start while the judge's thread was switched out does not count", "[gpu_watch]") {
  GpuWatchReading r{1900.0, 40.0, 1.0};
  r.start_disturbed = true;
  CHECK(GpuWatchFinding(r, "x").empty());
  r.longest_gap_us = 2400.0;  // a gap is the GPU's own record: it still counts
  CHECK(GpuWatchFinding(r, "x").find("up to 2400 us") != std::string::npos);
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
