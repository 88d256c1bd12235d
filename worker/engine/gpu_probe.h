// How many GPUs the rank processes would see, asked of `pkb-rank probe` (libtorch and a CUDA
// context: a few tenths of a second) once per node state, not once per job: the answer is kept in
// the cache folder under a key of what could change it (the boot, the driver, CUDA_VISIBLE_DEVICES,
// the rank binary).
#ifndef PKB_WORKER_ENGINE_GPU_PROBE_H_
#define PKB_WORKER_ENGINE_GPU_PROBE_H_

#include <string>

namespace pkb {

// The GPU count from `<rank_binary> probe`, or 0 when the probe fails (no driver, a CPU-only
// build). With a non-empty `cache_dir`, a count kept there under the same key is answered without
// starting the probe; a failed probe is never kept.
int ProbeGpuCount(const std::string& rank_binary, const std::string& cache_dir);

// The key ProbeGpuCount keeps its answer under: a hash of /proc/sys/kernel/random/boot_id,
// /proc/driver/nvidia/version, CUDA_VISIBLE_DEVICES (unset and empty differ) and the rank
// binary's path, size and modification time.
std::string GpuProbeKey(const std::string& rank_binary);

}  // namespace pkb

#endif  // PKB_WORKER_ENGINE_GPU_PROBE_H_
