#include "worker/engine/dump.h"

#include <torch/serialize.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/eval_spec.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "problems/harness/check.h"
#include "problems/harness/inputs.h"
#include "problems/harness/registry.h"

#ifdef PKB_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace pkb {
namespace {

// The dtype a tensor is written as: its own where stock torch.load has a storage class for it,
// else the integer dtype of its width (the bits, reinterpreted).
at::ScalarType StoredAs(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16:
    case at::kHalf:
    case at::kFloat:
    case at::kDouble:
    case at::kLong:
    case at::kInt:
    case at::kShort:
    case at::kByte:
    case at::kChar:
    case at::kBool:
    case at::kComplexFloat:
    case at::kComplexDouble:
      return t;
    default:
      switch (c10::elementSize(t)) {
        case 1:
          return at::kByte;
        case 2:
          return at::kShort;
        case 4:
          return at::kInt;
        default:
          return at::kLong;
      }
  }
}

// The dtype's attribute name in Python's torch module.
std::string TorchName(at::ScalarType t) {
  switch (t) {
    case at::kShort:
      return "int16";
    case at::kComplexDouble:
      return "complex128";
    case at::kUInt16:
      return "uint16";
    case at::kUInt32:
      return "uint32";
    case at::kUInt64:
      return "uint64";
    default:
      return DtypeName(t);
  }
}

// Writes `t` to dir/file and describes it in `files`.
absl::Status Save(const at::Tensor& t, const std::string& dir, const std::string& file,
                  nlohmann::json entry, nlohmann::json& files) {
  const at::ScalarType stored = StoredAs(t.scalar_type());
  at::Tensor cpu = t.cpu().contiguous();
  if (stored != t.scalar_type()) cpu = cpu.view(stored);
  std::vector<char> bytes = torch::pickle_save(c10::IValue(cpu));
  const std::string path = absl::StrCat(dir, "/", file);
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), bytes.size());
  if (!f) return absl::InternalError(absl::StrCat("cannot write ", path));
  entry["file"] = file;
  entry["dtype"] = TorchName(t.scalar_type());
  entry["stored_as"] = TorchName(stored);
  entry["shape"] = t.sizes().vec();
  files.push_back(std::move(entry));
  return absl::OkStatus();
}

}  // namespace

absl::Status DumpProblem(const EvalOptions& options, const std::string& dir) {
  v1::EvalSpec spec = options.spec;
  ApplyDefaults(&spec);
  PKB_ASSIGN_OR_RETURN(const Problem* p, FindProblem(spec.problem_id()));
  RunConfig cfg;
  cfg.m = spec.m();
  cfg.n = spec.n();
  cfg.world = spec.world_size();
  PKB_ASSIGN_OR_RETURN(cfg.dtype, DtypeFromName(spec.dtype()));
  PKB_RETURN_IF_ERROR(CheckRunnable(*p, cfg));
#ifdef PKB_WITH_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0) cfg.device = at::Device(at::kCUDA, 0);
#endif
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  int set = static_cast<int>(spec.set_offset());
  std::vector<Inputs> all = DrawAllInputs(*p, cfg, set);
  PKB_ASSIGN_OR_RETURN(auto expected, p->Oracle(all, cfg));
  nlohmann::json files = nlohmann::json::array(), scalars = nlohmann::json::array();
  for (int r = 0; r < cfg.world; ++r) {
    for (size_t i = 0; i < all[r].tensors.size(); ++i) {
      const std::string& name = all[r].names[i];
      PKB_RETURN_IF_ERROR(Save(all[r][i], dir, absl::StrCat("rank", r, ".input.", name, ".pt"),
                               {{"rank", r}, {"kind", "input"}, {"name", name}}, files));
    }
    const auto decls = p->OutputsOfSet(cfg, r, set);
    for (size_t i = 0; i < expected[r].size(); ++i) {
      const std::string name = i < decls.size() ? decls[i].name : "";
      PKB_RETURN_IF_ERROR(Save(expected[r][i], dir, absl::StrCat("rank", r, ".expected.", i, ".pt"),
                               {{"rank", r}, {"kind", "expected"}, {"index", i}, {"name", name}},
                               files));
    }
    for (const ScalarArg& a : all[r].scalars) {
      nlohmann::json v = {{"rank", r}, {"name", a.name}};
      if (a.is_int) {
        v["value"] = a.i;
      } else {
        v["value"] = a.f;
      }
      scalars.push_back(std::move(v));
    }
  }
  nlohmann::json manifest = {{"problem", p->info().id},
                             {"slug", p->info().slug},
                             {"version", p->info().version},
                             {"world_size", cfg.world},
                             {"m", cfg.m},
                             {"n", cfg.n},
                             {"dtype", DtypeName(cfg.dtype)},
                             {"set", set},
                             {"device", cfg.device.str()},
                             {"files", std::move(files)},
                             {"scalars", std::move(scalars)}};
  {
    const std::string path = absl::StrCat(dir, "/manifest.json");
    std::ofstream f(path);
    f << manifest.dump(1) << "\n";
    if (!f) return absl::InternalError(absl::StrCat("cannot write ", path));
  }
  std::printf("wrote inputs and expected outputs of %s (W=%d, set %d, device %s) to %s\n",
              p->info().slug.c_str(), cfg.world, set, cfg.device.str().c_str(), dir.c_str());
  return absl::OkStatus();
}

}  // namespace pkb
