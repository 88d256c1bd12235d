#include "worker/engine/dump.h"

#include <torch/serialize.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "problems/harness/check.h"
#include "problems/harness/inputs.h"
#include "problems/harness/registry.h"

#ifdef PKB_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace pkb {
namespace {

absl::Status Save(const at::Tensor& t, const std::string& path) {
  std::vector<char> bytes = torch::pickle_save(c10::IValue(t.cpu()));
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), bytes.size());
  if (!f) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace

absl::Status DumpProblem(const EvalOptions& o, const std::string& dir) {
  PKB_ASSIGN_OR_RETURN(const Problem* p, FindProblem(o.problem));
  RunConfig cfg;
  cfg.m = o.m;
  cfg.n = o.n;
  cfg.world = o.world;
  PKB_ASSIGN_OR_RETURN(cfg.dtype, DtypeFromName(o.dtype));
  PKB_RETURN_IF_ERROR(CheckRunnable(*p, cfg));
#ifdef PKB_WITH_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0) cfg.device = at::Device(at::kCUDA, 0);
#endif
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  int set = static_cast<int>(o.set_offset);
  std::vector<Inputs> all = DrawAllInputs(*p, cfg, set);
  PKB_ASSIGN_OR_RETURN(auto expected, p->Oracle(all, cfg));
  for (int r = 0; r < cfg.world; ++r) {
    for (size_t i = 0; i < all[r].tensors.size(); ++i) {
      PKB_RETURN_IF_ERROR(
          Save(all[r][i], absl::StrCat(dir, "/rank", r, ".input.", all[r].names[i], ".pt")));
    }
    for (size_t i = 0; i < expected[r].size(); ++i) {
      PKB_RETURN_IF_ERROR(
          Save(expected[r][i], absl::StrCat(dir, "/rank", r, ".expected.", i, ".pt")));
    }
  }
  std::printf("wrote inputs and expected outputs of %s (W=%d, set %d, device %s) to %s\n",
              p->info().slug.c_str(), cfg.world, set, cfg.device.str().c_str(), dir.c_str());
  return absl::OkStatus();
}

}  // namespace pkb
