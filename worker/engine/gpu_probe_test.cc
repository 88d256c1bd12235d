#include "worker/engine/gpu_probe.h"

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/files.h"

namespace pkb {
namespace {

// A stand-in for `pkb-rank probe` (TEST DOUBLE): prints the count in `answer`, and appends a line
// to `log` each time it runs.
struct FakeProbe {
  std::string dir = *MakeTempDir("/tmp", "pkb-probe-test");
  std::string binary = dir + "/pkb-rank";
  std::string log = dir + "/runs";
  std::string answer = dir + "/answer";
  std::string cache = dir + "/cache";

  explicit FakeProbe(const std::string& count) {
    Answer(count);
    REQUIRE(
        WriteFileAtomic(binary, absl::StrCat("#!/bin/sh\n[ \"$1\" = probe ] || exit 2\necho x >> ",
                                             log, "\ncat ", answer, "\n"))
            .ok());
    chmod(binary.c_str(), 0755);
  }
  ~FakeProbe() { RemoveTree(dir).IgnoreError(); }
  void Answer(const std::string& count) { REQUIRE(WriteFileAtomic(answer, count + "\n").ok()); }
  int Runs() {
    absl::StatusOr<std::string> text = ReadFile(log);
    if (!text.ok()) return 0;
    return int(std::count(text->begin(), text->end(), '\n'));
  }
};

// Sets CUDA_VISIBLE_DEVICES for one scope and puts back what was there.
struct VisibleDevices {
  std::optional<std::string> before;
  explicit VisibleDevices(const char* value) {
    if (const char* v = getenv("CUDA_VISIBLE_DEVICES")) before = v;
    if (value) {
      setenv("CUDA_VISIBLE_DEVICES", value, 1);
    } else {
      unsetenv("CUDA_VISIBLE_DEVICES");
    }
  }
  ~VisibleDevices() {
    if (before) {
      setenv("CUDA_VISIBLE_DEVICES", before->c_str(), 1);
    } else {
      unsetenv("CUDA_VISIBLE_DEVICES");
    }
  }
};

TEST_CASE("the GPU probe runs once per node state and its count is kept", "[engine][probe]") {
  VisibleDevices unset(nullptr);
  FakeProbe probe("4");
  CHECK(ProbeGpuCount(probe.binary, probe.cache) == 4);
  CHECK(probe.Runs() == 1);
  probe.Answer("2");  // a kept count is answered without asking again
  CHECK(ProbeGpuCount(probe.binary, probe.cache) == 4);
  CHECK(probe.Runs() == 1);
  {
    // Another set of visible GPUs is another key: the probe runs, and its own count is kept.
    VisibleDevices two("0,1");
    CHECK(ProbeGpuCount(probe.binary, probe.cache) == 2);
    CHECK(probe.Runs() == 2);
    CHECK(ProbeGpuCount(probe.binary, probe.cache) == 2);
    CHECK(probe.Runs() == 2);
  }
  {
    VisibleDevices empty("");  // set but empty (no GPU visible) is not unset
    CHECK(GpuProbeKey(probe.binary) != [&] {
      VisibleDevices none(nullptr);
      return GpuProbeKey(probe.binary);
    }());
  }
  // A rebuilt rank binary is another key.
  const std::string before = GpuProbeKey(probe.binary);
  std::filesystem::last_write_time(
      probe.binary, std::filesystem::last_write_time(probe.binary) + std::chrono::seconds(5));
  CHECK(GpuProbeKey(probe.binary) != before);
  CHECK(ProbeGpuCount(probe.binary, probe.cache) == 2);
  CHECK(probe.Runs() == 3);
  // Without a cache folder the probe runs every time.
  CHECK(ProbeGpuCount(probe.binary, "") == 2);
  CHECK(ProbeGpuCount(probe.binary, "") == 2);
  CHECK(probe.Runs() == 5);
}

TEST_CASE("a failed or empty GPU probe answers 0 and is never kept", "[engine][probe]") {
  VisibleDevices unset(nullptr);
  FakeProbe probe("0");
  CHECK(ProbeGpuCount(probe.binary, probe.cache) == 0);
  CHECK(ProbeGpuCount(probe.binary, probe.cache) == 0);
  CHECK(probe.Runs() == 2);
  probe.Answer("not a number");
  CHECK(ProbeGpuCount(probe.binary, probe.cache) == 0);
  CHECK(probe.Runs() == 3);
  probe.Answer("1");  // the GPU is back: found at once
  CHECK(ProbeGpuCount(probe.binary, probe.cache) == 1);
  CHECK(ProbeGpuCount(probe.dir + "/no-such-binary", probe.cache) == 0);
}

}  // namespace
}  // namespace pkb
