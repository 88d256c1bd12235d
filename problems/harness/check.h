// Comparing a candidate's outputs with the reference's, and poisoning outputs before a run.
//
// Every output is compared element by element in float64 (complex outputs on both parts):
// |actual - expected| <= atol + rtol * |expected|, or bit-exact where the tolerance says so.
// NaN never passes. Elements still holding the poison pattern are counted as unwritten.
#ifndef PKB_PROBLEMS_HARNESS_CHECK_H_
#define PKB_PROBLEMS_HARNESS_CHECK_H_

#include <ATen/ATen.h>

#include <vector>

#include "absl/status/statusor.h"
#include "pkb/v1/check.pb.h"
#include "problems/harness/problem.h"

namespace pkb {

// Fills `t` with the poison pattern of its dtype (a NaN with a payload for floating types, a
// fixed byte pattern otherwise). `variant` picks one of two patterns, so that an integer output
// whose expected value happens to equal one pattern is still caught by the other.
void Poison(at::Tensor& t, int variant = 0);

// The bits Poison writes into a tensor of `dtype`: `bits` (little-endian) repeated every `bytes`
// bytes of its memory (its element's size, at most 8). For fills made without ATen (the judge's
// batched landing, worker/engine/byte_moves.h).
struct PoisonFill {
  uint64_t bits = 0;
  int bytes = 1;
};
PoisonFill PoisonPattern(at::ScalarType dtype, int variant = 0);

// Number of elements of `t` whose bits equal the poison pattern.
int64_t CountPoisoned(const at::Tensor& t, int variant = 0);

// Compares one output. Shape or dtype differences fail with `problem` set.
v1::OutputCheck CompareOutput(const at::Tensor& actual, const at::Tensor& expected,
                              const Tolerance& tol, int poison_variant = 0);

// Compares all of one rank's outputs, in declaration order; `check.index` and `check.name` are
// set. Outputs with a row count (OutputDecl::rows_from) are compared on the reference's rows
// only, after the candidate's count has been checked against the reference's: a wrong count
// fails the output with `problem` set, whatever its rows hold. A reference that returns more
// rows than the declared capacity, or a count that disagrees with its own rows, is a problem
// bug and is returned as an error.
absl::StatusOr<std::vector<v1::OutputCheck>> CompareOutputs(
    const Problem& p, const RunConfig& cfg, const std::vector<OutputDecl>& decls,
    const std::vector<at::Tensor>& actual, const std::vector<at::Tensor>& expected,
    int poison_variant = 0);

// Checks a reference's (or an oracle's) outputs against the declaration: the count, dtypes and
// shapes, where an output with a row count may hold any number of rows up to its capacity and
// must hold exactly its count. An error names the first disagreement.
absl::Status CheckAgainstDeclaration(const std::vector<OutputDecl>& decls,
                                     const std::vector<at::Tensor>& outputs);

std::string DtypeName(at::ScalarType t);  // "bfloat16", "float32", ...
absl::StatusOr<at::ScalarType> DtypeFromName(const std::string& name);

}  // namespace pkb

#endif  // PKB_PROBLEMS_HARNESS_CHECK_H_
