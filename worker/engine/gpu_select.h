// Which of a node's GPUs one evaluation may use, for nodes that run several jobs at once: a
// worker per share of the node's GPUs (pkb-worker --gpus), each passing its share to every
// pkb-eval it starts (pkb-eval --gpus). Within a share:
//   - the ranks see only its GPUs: CUDA_VISIBLE_DEVICES holds their UUIDs (which name the same
//     GPUs whatever else the process can see);
//   - the sandbox binds only their device nodes (/dev/nvidia<minor>), so a submission cannot
//     open another share's GPU and disturb the job timed there;
//   - the GPU lock is taken per GPU (gpu_lock.h), so overlapping shares wait for each other.
//
//   PKB_ASSIGN_OR_RETURN(std::vector<std::string> uuids, ParseGpuUuids("GPU-8f0e...,GPU-1a2b..."));
//   PKB_ASSIGN_OR_RETURN(std::vector<int> minors, GpuMinors(uuids));
//   for (const std::string& node : GpuDeviceNodes("/dev", minors)) ...  // --dev-bind each
#ifndef PKB_WORKER_ENGINE_GPU_SELECT_H_
#define PKB_WORKER_ENGINE_GPU_SELECT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pkb {

// "GPU-<uuid>,GPU-<uuid>" as `nvidia-smi --query-gpu=uuid` prints them: each "GPU-" and 36
// characters of hex digits and dashes, none twice. An error names the item that is not.
absl::StatusOr<std::vector<std::string>> ParseGpuUuids(const std::string& list);

// The device minor (the N of /dev/nvidiaN) of each GPU, in the order given, from the driver's
// /proc/driver/nvidia/gpus/<bus>/information files ("GPU UUID:" and "Device Minor:" lines).
// `driver_dir` is that folder (tests pass a folder of their own). A UUID the driver does not
// list is an error naming it.
absl::StatusOr<std::vector<int>> GpuMinors(
    const std::vector<std::string>& uuids,
    const std::string& driver_dir = "/proc/driver/nvidia/gpus");

// How many GPUs the driver lists in `driver_dir` (a folder each, with its information file): the
// node's, whatever share of them a worker serves; 0 where there is no driver.
int NodeGpuCount(const std::string& driver_dir = "/proc/driver/nvidia/gpus");

// The NVIDIA device nodes in `dev_dir` a sandbox binds: every /dev/nvidia* (nvidiactl,
// nvidia-uvm, nvidia-caps...) but the GPUs' own nodes whose minor is not in `minors`. An empty
// `minors`: all of them (the whole node).
std::vector<std::string> GpuDeviceNodes(const std::string& dev_dir, const std::vector<int>& minors);

}  // namespace pkb

#endif  // PKB_WORKER_ENGINE_GPU_SELECT_H_
