#include "common/job_key.h"

#include "absl/strings/str_cat.h"
#include "common/hash.h"

namespace pkb {

std::string JobKey(const JobKeyFields& f) {
  std::string material =
      absl::StrCat("pkb-job-key-v1\nproblem=", f.problem_id, "\nversion=", f.problem_version,
                   "\nworld_size=", f.world_size, "\ndtype=", f.dtype, "\nm=", f.m, "\nn=", f.n,
                   "\ntrials=", f.trials, "\nwarmup=", f.warmup, "\niters=", f.iters,
                   "\ngpu_class=", f.gpu_class, "\nharness=", f.harness_version,
                   "\nsource_sha256=", Sha256Hex(f.source), "\n");
  if (!f.language.empty() && f.language != "cuda") {
    absl::StrAppend(&material, "language=", f.language, "\n");
  }
  const JobKeyFields defaults;
  if (f.set_offset != defaults.set_offset || f.max_sets != defaults.max_sets ||
      f.l2_multiple != defaults.l2_multiple || f.spot_checks != defaults.spot_checks) {
    absl::StrAppend(&material, "set_offset=", f.set_offset, "\nmax_sets=", f.max_sets,
                    "\nl2_multiple=", f.l2_multiple, "\nspot_checks=", f.spot_checks, "\n");
  }
  if (f.functional) absl::StrAppend(&material, "functional=1\n");
  return Sha256Hex(material);
}

}  // namespace pkb
