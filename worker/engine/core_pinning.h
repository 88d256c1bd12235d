// Which CPU cores a GPU rank's judge (and the candidate host it starts, which inherits them)
// runs on. A host-bound call's time depends on the core it runs on: two of the rank's threads on
// the two hardware threads of one physical core slow each other down, and which pair the
// scheduler picked differs from process to process. So each rank gets whole physical cores of its
// own, one hardware thread of each, and never a sibling of another rank's.
//
//   std::vector<int> allowed = AllowedCpus();
//   std::vector<int> mine = RankCores(ReadCpuTopology(allowed, "/sys/devices/system/cpu"), r, W);
//   if (!mine.empty()) PinTo(mine);
#ifndef PKB_WORKER_ENGINE_CORE_PINNING_H_
#define PKB_WORKER_ENGINE_CORE_PINNING_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace pkb {

struct LogicalCpu {
  int cpu = 0;   // the kernel's CPU number
  int core = 0;  // one number per physical core (package and core id together)
};

// The CPUs this process may run on (sched_getaffinity), in increasing order.
std::vector<int> AllowedCpus();

// The physical core of each CPU in `cpus`, from `<cpu_dir>/cpuN/topology/{physical_package_id,
// core_id}`. A CPU whose topology cannot be read counts as a core of its own.
std::vector<LogicalCpu> ReadCpuTopology(const std::vector<int>& cpus, const std::string& cpu_dir);

// Rank `rank` of `world`'s CPUs: one hardware thread (the lowest numbered) of each of up to
// `max_cores` physical cores, slices counted from the last core (core 0 takes most interrupts).
// Where there are fewer physical cores than ranks, slices of hardware threads instead; empty
// where there are fewer hardware threads than ranks (nothing is pinned).
std::vector<int> RankCores(const std::vector<LogicalCpu>& cpus, int rank, int world,
                           int max_cores = 4);

// The CPUs of `cpus` that a job of up to `world` ranks leaves alone: every hardware thread of a
// physical core no rank of a job of any size up to `world` is given (RankCores), so that work
// beside the job (a compile) shares no core with a timed rank. Where the ranks may take every
// core, the threads no rank is given (siblings of theirs); where they may take every thread, none
// (the caller pins nothing).
std::vector<int> CpusBesideRanks(const std::vector<LogicalCpu>& cpus, int world, int max_cores = 4);

// pkb-worker's --compile-slots where none is given: one compile at a time per CPU the compiles
// may run on (`cpus`: CpusBesideRanks on a GPU node, else every CPU the worker may use) and per
// kCompileGib of `memory_gib` (0: unknown), or only this worker's part of both where it serves
// `share_gpus` of the node's `node_gpus` (0: the worker's CPUs are its own already); at least 2,
// at most 8. An nvcc keeps about one CPU busy and takes about 1 GiB at its peak (cicc, an
// ATen-heavy source), and a worker stops its compiles while its job is timed.
inline constexpr int kCompileGib = 2;
int DefaultCompileSlots(int cpus, int share_gpus, int node_gpus, int memory_gib);

// How many CPUs the node has online, from `<cpu_dir>/online` ("0-15,32-47"); sysconf's count
// where that cannot be read.
int OnlineCpuCount(const std::string& cpu_dir = "/sys/devices/system/cpu");

// The memory this process's processes may use, in GiB: the node's, or less where the cgroup's
// limit (`<cgroup_dir>/memory.max`, cgroup v2 as a container sees it) is lower.
int MemoryGib(const std::string& cgroup_dir = "/sys/fs/cgroup");

// sched_setaffinity of the calling thread (and what it starts after) to `cpus`.
absl::Status PinTo(const std::vector<int>& cpus);

}  // namespace pkb

#endif  // PKB_WORKER_ENGINE_CORE_PINNING_H_
