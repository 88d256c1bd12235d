#include "problems/harness/inputs.h"

#include "absl/strings/str_cat.h"

namespace pkb {

Inputs DrawInputs(const Problem& p, const RunConfig& cfg, int rank, int set) {
  at::manual_seed(p.Seed(rank, set));
  return p.MakeInputs(cfg, rank, set);
}

std::vector<Inputs> DrawAllInputs(const Problem& p, const RunConfig& cfg, int set) {
  std::vector<Inputs> all;
  for (int r = 0; r < cfg.world; ++r) all.push_back(DrawInputs(p, cfg, r, set));
  return all;
}

absl::Status CheckRunnable(const Problem& p, const RunConfig& cfg) {
  if (cfg.m <= 0 || cfg.n <= 0 || cfg.world < 1) {
    return absl::InvalidArgumentError(absl::StrCat("problem ", p.info().id, ": M, N and W must be ",
                                                   "positive (got M=", cfg.m, ", N=", cfg.n,
                                                   ", W=", cfg.world, ")"));
  }
  absl::Status s = p.CanImplement(cfg);
  if (!s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("problem ", p.info().slug, " cannot run at W=", cfg.world,
                                     ", M=", cfg.m, ", N=", cfg.n, ": ", s.message()));
  }
  return absl::OkStatus();
}

}  // namespace pkb
