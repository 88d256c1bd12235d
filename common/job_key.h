// The job key: a hash of everything that determines an evaluation's result. The coordinator
// dedups and caches by it, and the engine reports it in every result; both compute it here so
// the two always agree.
#ifndef PKB_COMMON_JOB_KEY_H_
#define PKB_COMMON_JOB_KEY_H_

#include <cstdint>
#include <string>

namespace pkb {

struct JobKeyFields {
  std::string source;
  int32_t problem_id = 0;
  int32_t problem_version = 0;
  int32_t world_size = 1;
  std::string dtype;
  int64_t m = 0, n = 0;
  int32_t trials = 0, warmup = 0, iters = 0;
  std::string gpu_class;
  std::string harness_version;
  // "cuda" or "cpp" (a host-only CPU candidate). Enters the key only when not "cuda" (empty is
  // "cuda"), so the keys of CUDA jobs stay what they were before the field existed.
  std::string language = "cuda";
  // Engine knobs; they enter the key only when they differ from the defaults, so a job
  // submitted with defaults has the same key in the coordinator and in the engine.
  int64_t set_offset = 0;
  int32_t max_sets = 128;
  double l2_multiple = 3.0;
  int32_t spot_checks = 3;
  // A functional run (ranks may share GPUs; no speedup). Enters the key only when set.
  bool functional = false;
};

std::string JobKey(const JobKeyFields& f);

}  // namespace pkb

#endif  // PKB_COMMON_JOB_KEY_H_
