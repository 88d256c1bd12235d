#include "worker/engine/profiler.h"

#include <catch2/catch.hpp>

namespace pkb {
namespace {

using Catch::Matchers::WithinAbs;

RawActivity Kernel(const char* name, uint64_t start, uint64_t end) {
  RawActivity a;
  a.name = name;
  a.start_ns = start;
  a.end_ns = end;
  a.grid[0] = 132, a.block[0] = 256;
  return a;
}

RawActivity Copy(uint64_t start, uint64_t end, int64_t bytes) {
  RawActivity a;
  a.kind = v1::ProfileRecord::MEMCPY;
  a.name = "copy peer to peer";
  a.start_ns = start;
  a.end_ns = end;
  a.bytes = bytes;
  return a;
}

TEST_CASE("profile: records sorted by start with times from the first", "[profiler]") {
  v1::CallProfile p = SummarizeActivity(
      {Kernel("second", 5'000, 9'000), Copy(1'000, 2'000, 4096), Kernel("first", 2'000, 4'000)},
      0);
  REQUIRE(p.records_size() == 3);
  CHECK(p.records(0).kind() == v1::ProfileRecord::MEMCPY);
  CHECK(p.records(1).name() == "first");
  CHECK(p.records(2).name() == "second");
  CHECK_THAT(p.records(0).start_us(), WithinAbs(0.0, 1e-9));
  CHECK_THAT(p.records(2).start_us(), WithinAbs(4.0, 1e-9));
  CHECK_THAT(p.records(2).duration_us(), WithinAbs(4.0, 1e-9));
  CHECK_THAT(p.span_us(), WithinAbs(8.0, 1e-9));
  // 1-2, 2-4 and 5-9 us: idle from 4 to 5.
  CHECK_THAT(p.busy_us(), WithinAbs(7.0, 1e-9));
  CHECK(p.copy_bytes() == 4096);
  // Launch shapes are kernels' alone.
  CHECK(p.records(0).grid_size() == 0);
  REQUIRE(p.records(1).grid_size() == 3);
  CHECK(p.records(1).grid(0) == 132);
  CHECK(p.records(1).block(0) == 256);
  CHECK(p.dropped() == 0);
}

TEST_CASE("profile: overlapping streams count once in the busy time", "[profiler]") {
  // A long kernel with two short ones inside it on other streams, and one that outlasts it.
  v1::CallProfile p = SummarizeActivity({Kernel("long", 0, 10'000), Kernel("inside", 2'000, 3'000),
                                         Kernel("inside2", 4'000, 6'000),
                                         Kernel("past", 9'000, 12'000)},
                                        0);
  CHECK_THAT(p.busy_us(), WithinAbs(12.0, 1e-9));
  CHECK_THAT(p.span_us(), WithinAbs(12.0, 1e-9));
}

TEST_CASE("profile: records past the limit are counted as dropped", "[profiler]") {
  std::vector<RawActivity> many;
  for (int i = 0; i < kMaxProfileRecords + 10; ++i) {
    many.push_back(Kernel("k", static_cast<uint64_t>(i) * 100, static_cast<uint64_t>(i) * 100 + 50));
  }
  v1::CallProfile p = SummarizeActivity(many, 3);
  CHECK(p.records_size() == kMaxProfileRecords);
  CHECK(p.dropped() == 13);
  // The summary covers every record, kept or not.
  CHECK_THAT(p.span_us(), WithinAbs((kMaxProfileRecords + 9) * 0.1 + 0.05, 1e-9));
}

TEST_CASE("profile: no records and a long name", "[profiler]") {
  v1::CallProfile empty = SummarizeActivity({}, 2);
  CHECK(empty.records_size() == 0);
  CHECK(empty.span_us() == 0);
  CHECK(empty.dropped() == 2);
  v1::CallProfile named = SummarizeActivity({Kernel(std::string(600, 'x').c_str(), 0, 1)}, 0);
  CHECK(named.records(0).name().size() == 256);
}

#ifndef PKB_WITH_CUDA
TEST_CASE("profile: without CUDA the call runs and the note says why there is no profile",
          "[profiler]") {
  int ran = 0;
  auto p = ProfileCall([&] { ++ran; return absl::OkStatus(); }, [&] { ++ran; return absl::OkStatus(); });
  REQUIRE(p.ok());
  CHECK(ran == 2);
  CHECK(p->records_size() == 0);
  CHECK(p->note() == "no GPU profile: this build has no CUDA");
  auto failed = ProfileCall([] { return absl::AbortedError("pkb_run returned 3"); },
                            [] { return absl::OkStatus(); });
  CHECK(failed.status().message() == "pkb_run returned 3");
}
#endif

}  // namespace
}  // namespace pkb
