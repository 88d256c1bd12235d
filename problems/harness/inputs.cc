#include "problems/harness/inputs.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace pkb {
namespace {

constexpr int64_t kDefaultSide = 1024;
constexpr int64_t kMaxSide = 64 * kDefaultSide;
constexpr int64_t kMaxArea = 64 * kDefaultSide * kDefaultSide;
constexpr double kMaxRankBytesPerSet = 4.0 * (1 << 30);

// One rank's input and output bytes at the default shape, for the smallest world size the problem
// runs at; 0 when it cannot be drawn on the meta device.
double DefaultRankBytes(const Problem& p) {
  for (int w : {1, 2, 4, 8}) {
    RunConfig cfg;
    cfg.world = w;
    if (!p.CanImplement(cfg).ok()) continue;
    cfg.device = at::Device(at::kMeta);
    try {
      double bytes = 0;
      Inputs in = p.MakeInputs(cfg, 0, 0);
      for (const at::Tensor& t : in.tensors) bytes += static_cast<double>(t.nbytes());
      for (const OutputDecl& o : p.Outputs(cfg, 0)) {
        double numel = 1;
        for (int64_t s : o.shape) numel *= static_cast<double>(s);
        bytes += numel * static_cast<double>(c10::elementSize(o.dtype));
      }
      return bytes;
    } catch (const std::exception&) {
      return 0;
    }
  }
  return 0;
}

}  // namespace

ShapeLimits LimitsOf(const Problem& p) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* cache = new std::map<int, ShapeLimits>();
  absl::MutexLock lock(&mu);
  auto it = cache->find(p.info().id);
  if (it != cache->end()) return it->second;
  ShapeLimits l{kMaxSide, kMaxSide, kMaxArea};
  const double bytes = DefaultRankBytes(p);
  if (bytes > 0) {
    const double area =
        static_cast<double>(kDefaultSide * kDefaultSide) * kMaxRankBytesPerSet / bytes;
    l.max_mn = std::max<int64_t>(kDefaultSide * kDefaultSide,
                                 std::min<int64_t>(kMaxArea, static_cast<int64_t>(area)));
  }
  cache->emplace(p.info().id, l);
  return l;
}

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
  const ShapeLimits l = LimitsOf(p);
  if (cfg.m > l.max_m || cfg.n > l.max_n || cfg.m * cfg.n > l.max_mn) {
    return absl::InvalidArgumentError(absl::StrCat(
        "problem ", p.info().slug, ": M=", cfg.m, ", N=", cfg.n,
        " is beyond its limits (M <= ", l.max_m, ", N <= ", l.max_n, ", M*N <= ", l.max_mn, ")"));
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
