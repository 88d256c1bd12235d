#include "problems/harness/seed_text.h"

#include <cstdint>

#include "absl/strings/str_cat.h"

namespace pkb {
namespace {

constexpr int kRanks = 8;  // the largest world size
constexpr int kSets = 4;

// `value` as PKB writes it: 42 + 1000 id (+ the rest) where it has that form.
std::string Base(uint64_t value) {
  if (value >= 42 && (value - 42) % 1000 == 0) return absl::StrCat("42 + ", value - 42);
  return absl::StrCat(value);
}

}  // namespace

std::string SeedText(const Problem& p) {
  const uint64_t base = p.Seed(0, 0);
  const uint64_t per_rank = p.Seed(1, 0) - base, per_set = p.Seed(0, 1) - base;
  bool affine = true;
  for (int r = 0; r < kRanks; ++r) {
    for (int s = 0; s < kSets; ++s) {
      affine = affine && p.Seed(r, s) == base + per_rank * r + per_set * s;
    }
  }
  const std::string intro =
      "- Seeds: before drawing rank r's inputs of input set `set` (set t is PKB's trial t), the "
      "harness seeds every generator (torch.manual_seed) with ";
  if (affine && per_rank == 0) {
    return absl::StrCat(intro, Base(base), " + ", per_set, "*set, the same seed on every rank.");
  }
  if (affine) {
    return absl::StrCat(intro, Base(base), " + ", per_rank == 1 ? "" : absl::StrCat(per_rank, "*"),
                        "r + ", per_set, "*set.");
  }
  std::string text = absl::StrCat(intro, "Seed(r, set):");
  for (int s = 0; s < 2; ++s) {
    for (int r = 0; r < kRanks; ++r) absl::StrAppend(&text, " (", r, ", ", s, ") ", p.Seed(r, s));
  }
  return absl::StrCat(text, ".");
}

std::string FullStatement(const Problem& p) {
  const std::string& statement = p.info().statement;
  const bool ends_line = !statement.empty() && statement.back() == '\n';
  return absl::StrCat(statement, ends_line ? "" : "\n", SeedText(p));
}

}  // namespace pkb
