// The harness's whole comparison for problems with a tie rule (problems/harness/ties.h): the
// oracle's tie keys, then CompareOutputs, as the judge compares a candidate. Hazard tests of
// tie-aware problems use it where Passes (hazards.h) would compare element by element only.
#pragma once

#include <vector>

#include "problems/harness/ties.h"
#include "problems/hazards/hazards.h"

namespace pkb::hazards {

// Every rank's tie keys for the case's inputs and oracle outputs.
inline std::vector<std::vector<at::Tensor>> OracleKeys(const Case& c) {
  const TieRule* rule = TieRuleOf(*c.p);
  REQUIRE(rule != nullptr);
  auto keys = rule->OracleTieKeys(c.all, c.cfg, c.truth);
  REQUIRE(keys.ok());
  return std::move(*keys);
}

// The checks of rank `rank`'s outputs `got` against the oracle's, ties resolved.
inline std::vector<v1::OutputCheck> CheckWithTies(const Case& c,
                                                  const std::vector<std::vector<at::Tensor>>& keys,
                                                  int rank, const std::vector<at::Tensor>& got) {
  auto checks =
      CompareOutputs(*c.p, c.cfg, c.p->Outputs(c.cfg, rank), got, c.truth[rank], 0, keys[rank]);
  REQUIRE(checks.ok());
  return std::move(*checks);
}

// Whether every output passes.
inline bool PassesWithTies(const Case& c, const std::vector<std::vector<at::Tensor>>& keys,
                           int rank, const std::vector<at::Tensor>& got) {
  for (const auto& check : CheckWithTies(c, keys, rank, got)) {
    if (!check.ok()) return false;
  }
  return true;
}

}  // namespace pkb::hazards
