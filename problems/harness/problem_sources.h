// The problems' own source text, embedded at build time (problems/embed_sources.cmake), so that
// the catalog can show an agent exactly what the reference computes: the problem's file (inputs,
// reference, oracle, tolerances) and the family libraries it includes.
#ifndef PKB_PROBLEMS_HARNESS_PROBLEM_SOURCES_H_
#define PKB_PROBLEMS_HARNESS_PROBLEM_SOURCES_H_

#include <vector>

#include "absl/strings/string_view.h"

namespace pkb {

struct EmbeddedSource {
  absl::string_view path;  // relative to the checkout: "problems/collectives/p001_allreduce.cc"
  absl::string_view text;
};

// Problem `id`'s file, then each family library it includes (problems/<family>/<name>.h and its
// .cc where there is one), in the order of its #include lines. Empty for an unknown id. The
// harness (problems/harness/) is left out: it is the same for every problem.
std::vector<EmbeddedSource> ProblemSources(int id);

}  // namespace pkb

#endif  // PKB_PROBLEMS_HARNESS_PROBLEM_SOURCES_H_
