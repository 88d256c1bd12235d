#include "worker/engine/core_pinning.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace pkb {
namespace {

bool ReadInt(const std::string& path, int* out) {
  std::ifstream f(path);
  return static_cast<bool>(f >> *out);
}

}  // namespace

std::vector<int> AllowedCpus() {
  cpu_set_t allowed;
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  }
  return cpus;
}

std::vector<LogicalCpu> ReadCpuTopology(const std::vector<int>& cpus, const std::string& cpu_dir) {
  std::vector<LogicalCpu> out;
  // A CPU of unknown topology gets a core number no real one has (real ones are below 2^30).
  int unknown = 1 << 30;
  for (int cpu : cpus) {
    const std::string topo = absl::StrCat(cpu_dir, "/cpu", cpu, "/topology/");
    int package = 0, core = 0;
    LogicalCpu c;
    c.cpu = cpu;
    if (ReadInt(topo + "physical_package_id", &package) && ReadInt(topo + "core_id", &core) &&
        package >= 0 && core >= 0 && core < (1 << 16) && package < (1 << 13)) {
      c.core = (package << 16) | core;
    } else {
      c.core = unknown++;
    }
    out.push_back(c);
  }
  return out;
}

std::vector<int> RankCores(const std::vector<LogicalCpu>& cpus, int rank, int world,
                           int max_cores) {
  if (rank < 0 || world < 1 || rank >= world || max_cores < 1) return {};
  // Each physical core's lowest numbered hardware thread, the cores ordered by that thread.
  std::map<int, int> first_thread;  // core -> lowest CPU
  for (const LogicalCpu& c : cpus) {
    auto it = first_thread.find(c.core);
    if (it == first_thread.end() || c.cpu < it->second) first_thread[c.core] = c.cpu;
  }
  std::vector<int> cores;
  for (const auto& [core, cpu] : first_thread) cores.push_back(cpu);
  std::sort(cores.begin(), cores.end());
  std::vector<int> pool = cores;
  if (static_cast<int>(cores.size()) < world) {
    // Fewer physical cores than ranks: hardware threads, siblings shared.
    pool.clear();
    for (const LogicalCpu& c : cpus) pool.push_back(c.cpu);
    std::sort(pool.begin(), pool.end());
  }
  const int per_rank = std::min<int>(max_cores, static_cast<int>(pool.size()) / world);
  if (per_rank < 1) return {};
  std::vector<int> mine;
  // Counted from the last: rank 0 gets the highest numbered cores.
  for (int k = 0; k < per_rank; ++k) {
    mine.push_back(pool[pool.size() - 1 - (rank * per_rank + k)]);
  }
  std::sort(mine.begin(), mine.end());
  return mine;
}

std::vector<int> CpusBesideRanks(const std::vector<LogicalCpu>& cpus, int world, int max_cores) {
  std::set<int> ranks;  // CPUs given to a rank of a job of any size up to `world`
  for (int w = 1; w <= world; ++w) {
    for (int r = 0; r < w; ++r) {
      for (int c : RankCores(cpus, r, w, max_cores)) ranks.insert(c);
    }
  }
  std::set<int> taken_cores;
  for (const LogicalCpu& c : cpus) {
    if (ranks.count(c.cpu)) taken_cores.insert(c.core);
  }
  std::vector<int> free_cores, free_threads;
  for (const LogicalCpu& c : cpus) {
    if (!taken_cores.count(c.core)) free_cores.push_back(c.cpu);
    if (!ranks.count(c.cpu)) free_threads.push_back(c.cpu);
  }
  std::vector<int>& out = free_cores.empty() ? free_threads : free_cores;
  std::sort(out.begin(), out.end());
  return out;
}

int DefaultCompileSlots(int cpus, int share_gpus, int node_gpus, int memory_gib) {
  int mine = cpus;
  if (memory_gib > 0) mine = std::min(mine, memory_gib / kCompileGib);
  if (share_gpus > 0 && node_gpus > share_gpus) mine = mine * share_gpus / node_gpus;
  return std::clamp(mine, 2, 8);
}

int OnlineCpuCount(const std::string& cpu_dir) {
  const int fallback = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  std::string text;
  std::getline(std::ifstream(cpu_dir + "/online"), text);
  int count = 0;
  for (absl::string_view range :
       absl::StrSplit(absl::StripAsciiWhitespace(text), ',', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> ends = absl::StrSplit(range, '-');
    int first = 0, last = 0;
    if (!absl::SimpleAtoi(ends.first, &first)) return fallback;
    if (ends.second.empty()) {
      last = first;
    } else if (!absl::SimpleAtoi(ends.second, &last) || last < first) {
      return fallback;
    }
    count += last - first + 1;
  }
  return count > 0 ? count : fallback;
}

int MemoryGib(const std::string& cgroup_dir) {
  constexpr int64_t kGib = int64_t{1} << 30;
  int64_t bytes = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  std::string limit;  // "max" where there is none
  std::getline(std::ifstream(cgroup_dir + "/memory.max"), limit);
  int64_t cgroup = 0;
  if (absl::SimpleAtoi(absl::StripAsciiWhitespace(limit), &cgroup) && cgroup > 0) {
    bytes = bytes > 0 ? std::min(bytes, cgroup) : cgroup;
  }
  return bytes > 0 ? static_cast<int>(bytes / kGib) : 0;
}

absl::Status PinTo(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot pin to CPUs ", absl::StrJoin(cpus, ","), ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace pkb
