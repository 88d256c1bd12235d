// Loading a compiled candidate into a rank process and calling it through the C ABI of
// pkb/candidate.h. Tensors cross the boundary as pkb_tensor views of at::Tensor storage.
#ifndef PKB_WORKER_ENGINE_CANDIDATE_LOADER_H_
#define PKB_WORKER_ENGINE_CANDIDATE_LOADER_H_

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pkb/candidate.h"
#include "problems/harness/problem.h"

namespace pkb {

struct Candidate {
  void* handle = nullptr;
  pkb_init_fn init = nullptr;
  pkb_run_fn run = nullptr;
};

// dlopens `path`, checks the declared API version and finds the entry points.
absl::StatusOr<Candidate> LoadCandidate(const std::string& path);

absl::StatusOr<pkb_tensor> ToPkbTensor(const at::Tensor& t);
std::vector<pkb_scalar> ToPkbScalars(const std::vector<ScalarArg>& args);
// The ATen type of a pkb_dtype, or an error for a number the API does not define.
absl::StatusOr<at::ScalarType> ScalarTypeOfPkb(int32_t dtype);

}  // namespace pkb

#endif  // PKB_WORKER_ENGINE_CANDIDATE_LOADER_H_
