#include "worker/engine/core_pinning.h"

#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/files.h"

namespace pkb {
namespace {

// A sysfs cpu folder of `cpus` CPUs, CPU c on package package_of(c) and core core_of(c).
std::string FakeCpuDir(int cpus, int (*package_of)(int), int (*core_of)(int)) {
  std::string dir = *MakeTempDir("/tmp", "pkb-cpu-topology");
  for (int c = 0; c < cpus; ++c) {
    std::string topo = absl::StrCat(dir, "/cpu", c, "/topology");
    std::filesystem::create_directories(topo);
    std::ofstream(topo + "/physical_package_id") << package_of(c) << "\n";
    std::ofstream(topo + "/core_id") << core_of(c) << "\n";
  }
  return dir;
}

std::vector<int> Range(int n) {
  std::vector<int> v;
  for (int i = 0; i < n; ++i) v.push_back(i);
  return v;
}

TEST_CASE("siblings numbered apart (cpu c and c+8 on one core): one thread per core, none shared",
          "[pinning]") {
  // 8 cores, 16 threads: CPU c and c + 8 are the two threads of core c % 8.
  std::string dir = FakeCpuDir(
      16, [](int) { return 0; }, [](int c) { return c % 8; });
  auto cpus = ReadCpuTopology(Range(16), dir);
  CHECK(RankCores(cpus, 0, 1) == std::vector<int>{4, 5, 6, 7});
  CHECK(RankCores(cpus, 0, 2) == std::vector<int>{4, 5, 6, 7});
  CHECK(RankCores(cpus, 1, 2) == std::vector<int>{0, 1, 2, 3});
  // W = 8: a core each.
  for (int r = 0; r < 8; ++r) CHECK(RankCores(cpus, r, 8) == std::vector<int>{7 - r});
  std::filesystem::remove_all(dir);
}

TEST_CASE("work beside a job keeps off its ranks' cores, siblings included, while there are others",
          "[pinning]") {
  // 8 cores, 16 threads, CPU c and c + 8 on core c % 8. W = 1 takes cores 4-7.
  std::string dir = FakeCpuDir(
      16, [](int) { return 0; }, [](int c) { return c % 8; });
  auto cpus = ReadCpuTopology(Range(16), dir);
  CHECK(CpusBesideRanks(cpus, 1) == std::vector<int>{0, 1, 2, 3, 8, 9, 10, 11});
  // W = 2 takes every core: the threads beside them, then.
  CHECK(CpusBesideRanks(cpus, 2) == std::vector<int>{8, 9, 10, 11, 12, 13, 14, 15});
  // W = 16: every thread a rank's: nothing.
  CHECK(CpusBesideRanks(cpus, 16).empty());
  std::filesystem::remove_all(dir);
  // Without hardware threads: the cores no rank has.
  std::string flat = FakeCpuDir(
      16, [](int) { return 0; }, [](int c) { return c; });
  auto plain = ReadCpuTopology(Range(16), flat);
  CHECK(CpusBesideRanks(plain, 1) == Range(12));
  CHECK(CpusBesideRanks(plain, 2) == Range(8));
  // A job of any size up to the largest: 30 cores, W = 8 gives 3 cores a rank (24), W = 7 gives
  // 4 (28): the 2 cores left by both.
  std::string thirty = FakeCpuDir(
      30, [](int) { return 0; }, [](int c) { return c; });
  CHECK(CpusBesideRanks(ReadCpuTopology(Range(30), thirty), 8) == Range(2));
  std::filesystem::remove_all(thirty);
  std::filesystem::remove_all(flat);
}

TEST_CASE("siblings numbered together (cpu 2k and 2k+1 on one core)", "[pinning]") {
  std::string dir = FakeCpuDir(
      16, [](int) { return 0; }, [](int c) { return c / 2; });
  auto cpus = ReadCpuTopology(Range(16), dir);
  // The old rule (the last 4 CPUs) gave 12-15: two cores, each thread beside a sibling.
  CHECK(RankCores(cpus, 0, 1) == std::vector<int>{8, 10, 12, 14});
  CHECK(RankCores(cpus, 1, 2) == std::vector<int>{0, 2, 4, 6});
  // W = 16 on 8 cores: hardware threads then, siblings shared.
  CHECK(RankCores(cpus, 0, 16) == std::vector<int>{15});
  CHECK(RankCores(cpus, 15, 16) == std::vector<int>{0});
  // More ranks than threads: nothing pinned.
  CHECK(RankCores(cpus, 0, 17).empty());
  std::filesystem::remove_all(dir);
}

TEST_CASE("two packages with the same core ids are different cores", "[pinning]") {
  std::string dir = FakeCpuDir(
      8, [](int c) { return c / 4; }, [](int c) { return c % 4; });
  auto cpus = ReadCpuTopology(Range(8), dir);
  CHECK(RankCores(cpus, 0, 2) == std::vector<int>{4, 5, 6, 7});
  CHECK(RankCores(cpus, 1, 2) == std::vector<int>{0, 1, 2, 3});
  std::filesystem::remove_all(dir);
}

TEST_CASE("only the allowed CPUs, and CPUs of unreadable topology as cores of their own",
          "[pinning]") {
  std::string dir = FakeCpuDir(
      8, [](int) { return 0; }, [](int c) { return c % 4; });
  // Allowed: 0, 1, 4 (sibling of 0) and 9 (no topology files).
  auto cpus = ReadCpuTopology({0, 1, 4, 9}, dir);
  REQUIRE(cpus.size() == 4);
  CHECK(RankCores(cpus, 0, 1) == std::vector<int>{0, 1, 9});
  CHECK(RankCores(cpus, 0, 3) == std::vector<int>{9});
  CHECK(RankCores(cpus, 2, 3) == std::vector<int>{0});
  CHECK(RankCores(cpus, 0, 1, 2) == std::vector<int>{1, 9});
  CHECK(RankCores(cpus, 3, 3).empty());
  CHECK(RankCores({}, 0, 1).empty());
  std::filesystem::remove_all(dir);
}

TEST_CASE("this machine's own topology gives each rank cores of its own", "[pinning]") {
  auto cpus = ReadCpuTopology(AllowedCpus(), "/sys/devices/system/cpu");
  REQUIRE(!cpus.empty());
  std::vector<int> all;
  for (int r = 0; r < 2; ++r) {
    auto mine = RankCores(cpus, r, 2);
    all.insert(all.end(), mine.begin(), mine.end());
  }
  std::sort(all.begin(), all.end());
  CHECK(std::adjacent_find(all.begin(), all.end()) == all.end());
  const std::vector<int> before = AllowedCpus();
  auto one = RankCores(cpus, 0, 1);
  REQUIRE(!one.empty());
  CHECK(PinTo(one).ok());
  CHECK(AllowedCpus() == one);
  absl::Status offline = PinTo({1023});
  CHECK(!offline.ok());
  CHECK(std::string(offline.message()).find("cannot pin to CPUs 1023") != std::string::npos);
  CHECK(PinTo(before).ok());
}

TEST_CASE(
    "a worker's compile slots: one per CPU its compiles may use, its share's on a shared node",
    "[pinning]") {
  // A 2-CPU machine (CI's): 2, as before the default followed the CPUs; no CPU known: 2.
  CHECK(DefaultCompileSlots(0, 0, 0, 0) == 2);
  CHECK(DefaultCompileSlots(1, 0, 0, 24) == 2);
  CHECK(DefaultCompileSlots(2, 0, 0, 24) == 2);
  // A 16-CPU node of one GPU whose W = 1 ranks take 4 cores: 12 left, at most 8, from the
  // topology to the count.
  std::string flat = FakeCpuDir(
      16, [](int) { return 0; }, [](int c) { return c; });
  const int beside = static_cast<int>(CpusBesideRanks(ReadCpuTopology(Range(16), flat), 1).size());
  CHECK(beside == 12);
  CHECK(DefaultCompileSlots(beside, 0, 0, 128) == 8);
  CHECK(DefaultCompileSlots(beside, 1, 1, 128) == 8);
  CHECK(DefaultCompileSlots(5, 0, 0, 128) == 5);
  // Memory: one compile per 2 GiB.
  CHECK(DefaultCompileSlots(12, 0, 0, 8) == 4);
  CHECK(DefaultCompileSlots(12, 0, 0, 3) == 2);
  // A worker of one GPU of eight, free to run on all 124 CPUs the ranks leave: an eighth.
  CHECK(DefaultCompileSlots(124, 1, 8, 2048) == 8);
  CHECK(DefaultCompileSlots(40, 1, 8, 2048) == 5);
  CHECK(DefaultCompileSlots(40, 2, 8, 2048) == 8);
  CHECK(DefaultCompileSlots(12, 3, 8, 2048) == 4);  // 12 * 3 / 8, not 12 / 8 * 3
  CHECK(DefaultCompileSlots(8, 1, 8, 2048) == 2);
  CHECK(DefaultCompileSlots(124, 1, 8, 64) == 4);  // an eighth of 32 compiles' memory
  // A share no smaller than what the driver lists, or node_gpus 0 (the worker's CPUs are its
  // own, pinned to a part of the node): no scaling.
  CHECK(DefaultCompileSlots(12, 2, 1, 128) == 8);
  CHECK(DefaultCompileSlots(6, 1, 0, 128) == 6);
  std::filesystem::remove_all(flat);
}

TEST_CASE("the node's online CPUs from sysfs, and the memory a worker may use", "[pinning]") {
  std::string dir = *MakeTempDir("/tmp", "pkb-cpu-online");
  std::ofstream(dir + "/online") << "0-15,32-47,64\n";
  CHECK(OnlineCpuCount(dir) == 33);
  std::ofstream(dir + "/online") << "0\n";
  CHECK(OnlineCpuCount(dir) == 1);
  // Unreadable or malformed: sysconf's count.
  const int sysconf_count = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  std::ofstream(dir + "/online") << "0-x\n";
  CHECK(OnlineCpuCount(dir) == sysconf_count);
  CHECK(OnlineCpuCount(dir + "/none") == sysconf_count);
  // Memory: the node's, or a lower cgroup limit.
  const int node = MemoryGib(dir + "/none");
  CHECK(node > 0);
  std::ofstream(dir + "/memory.max") << "max\n";
  CHECK(MemoryGib(dir) == node);
  std::ofstream(dir + "/memory.max") << (int64_t{3} << 30) << "\n";
  CHECK(MemoryGib(dir) == std::min(node, 3));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pkb
