#include "worker/engine/gpu_select.h"

#include <catch2/catch.hpp>
#include <filesystem>

#include "common/files.h"

namespace pkb {
namespace {

constexpr char kA[] = "GPU-8f0e2a3b-1c4d-5e6f-7a8b-9c0d1e2f3a4b";
constexpr char kB[] = "GPU-11111111-2222-3333-4444-555555555555";

TEST_CASE("pkb-eval's --gpus takes GPU UUIDs as nvidia-smi prints them, and names what is not one",
          "[engine][gpu_select]") {
  auto two = ParseGpuUuids(std::string(kA) + ", " + kB);
  REQUIRE(two.ok());
  CHECK(*two == std::vector<std::string>{kA, kB});
  for (const std::string& bad :
       std::vector<std::string>{"0", "0,1", "GPU-123", "", std::string(kA) + ",",
                                std::string("gpu-") + (kA + 4), std::string(kA) + "x"}) {
    auto r = ParseGpuUuids(bad);
    INFO(bad);
    CHECK(absl::IsInvalidArgument(r.status()));
    CHECK_THAT(std::string(r.status().message()), Catch::Contains("is not a GPU UUID"));
  }
  auto twice = ParseGpuUuids(std::string(kA) + "," + kA);
  CHECK_THAT(std::string(twice.status().message()), Catch::Contains("given twice"));
  // The same GPU in upper case is the same GPU (its lock file is the lower-case name).
  std::string upper = kA;
  for (size_t i = 4; i < upper.size(); ++i) upper[i] = static_cast<char>(toupper(upper[i]));
  CHECK_THAT(std::string(ParseGpuUuids(std::string(kA) + "," + upper).status().message()),
             Catch::Contains("given twice"));
}

// A stand-in for /proc/driver/nvidia/gpus: one folder per GPU with the driver's information file.
void WriteGpu(const std::string& dir, const std::string& bus, const std::string& uuid, int minor) {
  std::filesystem::create_directories(dir + "/" + bus);
  REQUIRE(WriteFileAtomic(dir + "/" + bus + "/information",
                          "Model: \t\t NVIDIA H200\nIRQ:   \t\t 42\nGPU UUID: \t " + uuid +
                              "\nVideo BIOS: \t 96.00.9f.00.01\nBus Type: \t PCIe\n"
                              "Bus Location: \t " +
                              bus + "\nDevice Minor: \t " + std::to_string(minor) +
                              "\nGPU Excluded:\t No\n")
              .ok());
}

TEST_CASE("a share's device minors come from the driver's information files, by UUID",
          "[engine][gpu_select]") {
  auto dir = MakeTempDir("/tmp/pkb-test", "gpu-select-");
  REQUIRE(dir.ok());
  WriteGpu(*dir, "0000:18:00.0", kB, 0);
  WriteGpu(*dir, "0000:2a:00.0", kA, 3);  // minors need not follow the bus order
  auto minors = GpuMinors({kA, kB}, *dir);
  REQUIRE(minors.ok());
  CHECK(*minors == std::vector<int>{3, 0});
  // Upper-case hex (as some tools print it) names the same GPU.
  std::string upper = kA;
  for (size_t i = 4; i < upper.size(); ++i) upper[i] = static_cast<char>(toupper(upper[i]));
  REQUIRE(GpuMinors({upper}, *dir).ok());
  auto missing = GpuMinors({"GPU-00000000-0000-0000-0000-000000000000"}, *dir);
  CHECK(absl::IsNotFound(missing.status()));
  CHECK_THAT(
      std::string(missing.status().message()),
      Catch::Contains("the driver lists no GPU GPU-00000000") && Catch::Contains("2 GPU(s)"));
  CHECK(absl::IsNotFound(GpuMinors({kA}, *dir + "/none").status()));
  // The node's count: every GPU the driver lists, a folder without its information file none.
  CHECK(NodeGpuCount(*dir) == 2);
  std::filesystem::create_directories(*dir + "/0000:3c:00.0");
  CHECK(NodeGpuCount(*dir) == 2);
  CHECK(NodeGpuCount(*dir + "/none") == 0);
  (void)RemoveTree(*dir);
}

TEST_CASE("a share's sandbox binds the driver's nodes and its own GPUs' nodes only",
          "[engine][gpu_select]") {
  auto dir = MakeTempDir("/tmp/pkb-test", "gpu-dev-");
  REQUIRE(dir.ok());
  for (const char* n : {"nvidia0", "nvidia1", "nvidia3", "nvidia10", "nvidiactl", "nvidia-uvm",
                        "nvidia-uvm-tools", "nvidia-modeset", "null", "zero"})
    REQUIRE(WriteFileAtomic(*dir + "/" + n, "").ok());
  std::filesystem::create_directories(*dir + "/nvidia-caps");
  auto names = [&](const std::vector<int>& minors) {
    std::vector<std::string> out;
    for (const std::string& p : GpuDeviceNodes(*dir, minors))
      out.push_back(std::filesystem::path(p).filename().string());
    return out;
  };
  const std::vector<std::string> driver = {"nvidia-caps", "nvidia-modeset", "nvidia-uvm",
                                           "nvidia-uvm-tools", "nvidiactl"};
  auto with = [&](std::vector<std::string> gpus) {
    gpus.insert(gpus.end(), driver.begin(), driver.end());
    std::sort(gpus.begin(), gpus.end());
    return gpus;
  };
  CHECK(names({}) == with({"nvidia0", "nvidia1", "nvidia10", "nvidia3"}));
  CHECK(names({1}) == with({"nvidia1"}));
  CHECK(names({3, 0}) == with({"nvidia0", "nvidia3"}));
  CHECK(names({10}) == with({"nvidia10"}));
  (void)RemoveTree(*dir);
}

}  // namespace
}  // namespace pkb
