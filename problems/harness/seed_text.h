// The sentence that tells agents how a problem's inputs are seeded, rendered from Problem::Seed,
// so that the statement cannot drift from the seeds the harness uses. Statements say what is
// drawn and in which order; the catalog appends this sentence (FullStatement).
#ifndef PKB_PROBLEMS_HARNESS_SEED_TEXT_H_
#define PKB_PROBLEMS_HARNESS_SEED_TEXT_H_

#include <string>

#include "problems/harness/problem.h"

namespace pkb {

// "- Seeds: ..." for p.Seed(rank, set): PKB's per-rank formula, one seed shared by every rank,
// another affine rule, or (for any other rule) the seeds of the first ranks and sets.
std::string SeedText(const Problem& p);

// The statement agents read: info().statement, then SeedText(p) on a line of its own.
std::string FullStatement(const Problem& p);

}  // namespace pkb

#endif  // PKB_PROBLEMS_HARNESS_SEED_TEXT_H_
