// What every registered problem declares agrees with what it does: its world sizes with
// CanImplement, its seed sentence with Seed, its embedded source with its file, its ranked shapes
// with CheckRunnable.
#include "problems/harness/registry.h"

#include <catch2/catch.hpp>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "problems/harness/inputs.h"
#include "problems/harness/problem_sources.h"
#include "problems/harness/seed_text.h"
#include "problems/harness/shapes.h"

namespace pkb {
namespace {

TEST_CASE("every problem's world sizes are those it runs at, at the default shape") {
  for (const Problem* p : AllProblems()) {
    std::vector<int> runs;
    for (int w : {1, 2, 4, 8}) {
      RunConfig cfg;
      cfg.world = w;
      if (CheckRunnable(*p, cfg).ok()) runs.push_back(w);
    }
    INFO("problem " << p->info().id);
    CHECK(p->WorldSizes() == runs);
  }
}

TEST_CASE("the seed sentence follows Seed") {
  const Problem* per_rank = *FindProblem(13);
  CHECK(SeedText(*per_rank).find("42 + 13000 + r + 1000003*set.") != std::string::npos);
  const Problem* shared = *FindProblem(40);
  CHECK(SeedText(*shared).find("42 + 40000 + 1000003*set, the same seed on every rank") !=
        std::string::npos);
  for (const Problem* p : AllProblems()) {
    INFO("problem " << p->info().id);
    const std::string full = FullStatement(*p);
    CHECK(full.rfind("\n- Seeds: ") == full.size() - SeedText(*p).size() - 1);
  }
}

TEST_CASE("every problem's source is its own file and the family libraries it includes") {
  for (const Problem* p : AllProblems()) {
    const int id = p->info().id;
    INFO("problem " << id);
    std::vector<EmbeddedSource> files = ProblemSources(id);
    REQUIRE(!files.empty());
    CHECK(absl::StrContains(files[0].path, absl::StrFormat("/p%03d_", id)));
    // The reference is in its file, or in the family library it is written over (41, 42 and the
    // MoE pipelines).
    bool has_reference = false;
    for (const EmbeddedSource& f : files) has_reference |= absl::StrContains(f.text, "Reference(");
    CHECK(has_reference);
    CHECK(absl::StrContains(files[0].text, "PKB_REGISTER_PROBLEM("));
    for (const EmbeddedSource& f : files) CHECK(!absl::StartsWith(f.path, "problems/harness/"));
  }
  // Problem 41 (ZeRO-1) is written over two family libraries, Adam's and ZeRO's, in the order of
  // its #include lines.
  std::vector<std::string> paths;
  for (const EmbeddedSource& f : ProblemSources(41)) paths.emplace_back(f.path);
  CHECK(paths == std::vector<std::string>{"problems/dp/p041_zero1_optimizer_shard.cc",
                                          "problems/dp/adam.h", "problems/dp/adam.cc",
                                          "problems/dp/zero.h", "problems/dp/zero.cc"});
  CHECK(ProblemSources(999).empty());
}

// Whether `r` is a well-formed range around the default that `p` runs everywhere at `world`: its
// four corners and `samples` random points pass CheckRunnable (which holds them to LimitsOf too).
absl::Status CheckRankedShapes(const Problem& p, int world, const ShapeRange& r, int samples) {
  RunConfig def;
  if (r.m_step < 1 || r.n_step < 1 || r.m_min > r.m_max || r.n_min > r.n_max)
    return absl::InvalidArgumentError("malformed range");
  auto holds = [](int64_t min, int64_t max, int64_t step, int64_t v) {
    return min <= v && v <= max && (v - min) % step == 0;
  };
  if (!holds(r.m_min, r.m_max, r.m_step, def.m) || !holds(r.n_min, r.n_max, r.n_step, def.n))
    return absl::InvalidArgumentError("the default shape is not in the range");
  if ((r.m_max - r.m_min) % r.m_step != 0 || (r.n_max - r.n_min) % r.n_step != 0)
    return absl::InvalidArgumentError("a maximum is not on its step");
  std::mt19937_64 rng(1000 * p.info().id + world);
  std::vector<std::pair<int64_t, int64_t>> points = {
      {r.m_min, r.n_min}, {r.m_min, r.n_max}, {r.m_max, r.n_min}, {r.m_max, r.n_max}};
  const int64_t cm = (r.m_max - r.m_min) / r.m_step + 1, cn = (r.n_max - r.n_min) / r.n_step + 1;
  for (int i = 0; i < samples; ++i) {
    points.emplace_back(r.m_min + static_cast<int64_t>(rng() % cm) * r.m_step,
                        r.n_min + static_cast<int64_t>(rng() % cn) * r.n_step);
  }
  for (const auto& [m, n] : points) {
    RunConfig cfg;
    cfg.world = world;
    cfg.m = m;
    cfg.n = n;
    PKB_RETURN_IF_ERROR(CheckRunnable(p, cfg));
  }
  return absl::OkStatus();
}

TEST_CASE("every problem's ranked shapes run at every world size it supports") {
  int varied = 0, total = 0;
  for (const Problem* p : AllProblems()) {
    for (int w : p->WorldSizes()) {
      const ShapeRange r = p->RankedShapes(w);
      INFO("problem " << p->info().slug << " W=" << w << ": m " << r.m_min << ".." << r.m_max
                      << " step " << r.m_step << ", n " << r.n_min << ".." << r.n_max << " step "
                      << r.n_step);
      const absl::Status s = CheckRankedShapes(*p, w, r, 32);
      INFO(std::string(s.message()));
      CHECK(s.ok());
      ++total;
      if (r.m_min < r.m_max || r.n_min < r.n_max) ++varied;
      // Shapes as production has them: a dimension that varies is aligned.
      if (r.m_min < r.m_max) CHECK(r.m_step % kRankedShapeAlignment == 0);
      if (r.n_min < r.n_max) CHECK(r.n_step % kRankedShapeAlignment == 0);
    }
  }
  // The derivation must not collapse to the default everywhere: most problems take other shapes.
  CHECK(varied * 2 > total);
}

// Small problems with known constraints, to hold the derivation (and the check above) to them.
class ShapedProblem : public Problem {
 public:
  enum Rule { kMDivisibleByW, kMMultipleOf3, kIgnoresN, kDeclaresTooMuch };
  explicit ShapedProblem(Rule rule) : rule_(rule) { info_.id = 990 + rule; }
  const ProblemInfo& info() const override { return info_; }
  absl::Status CanImplement(const RunConfig& cfg) const override {
    if (rule_ == kMDivisibleByW && cfg.m % cfg.world != 0) return absl::InvalidArgumentError("W|M");
    if ((rule_ == kMMultipleOf3 || rule_ == kDeclaresTooMuch) && cfg.m % 3 != 0 && cfg.m != 1024)
      return absl::InvalidArgumentError("3|M");
    return absl::OkStatus();
  }
  ShapeRange RankedShapes(int world) const override {
    if (rule_ == kDeclaresTooMuch) return {512, 2048, 512, 1024, 1024, 1};  // 512 % 3 != 0
    return Problem::RankedShapes(world);
  }
  Inputs MakeInputs(const RunConfig& cfg, int, int) const override {
    Inputs in;
    in.Add("x", at::empty({cfg.m, rule_ == kIgnoresN ? 16 : cfg.n},
                          at::TensorOptions().device(cfg.device)));
    return in;
  }
  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int) const override {
    return {{"y", {cfg.m, rule_ == kIgnoresN ? 16 : cfg.n}, cfg.dtype}};
  }
  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm&, const Inputs&,
                                                    const RunConfig&) const override {
    return absl::UnimplementedError("shapes only");
  }
  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>&,
                                                              const RunConfig&) const override {
    return absl::UnimplementedError("shapes only");
  }
  Roofline GetRoofline(const RunConfig&) const override { return {}; }

 private:
  Rule rule_;
  ProblemInfo info_;
};

TEST_CASE("the derived ranked shapes follow the problem's constraints") {
  const ShapedProblem by_w(ShapedProblem::kMDivisibleByW);
  const ShapeRange r8 = by_w.RankedShapes(8);
  CHECK(r8.m_min == 512);
  CHECK(r8.m_max == 2048);
  CHECK(r8.m_step == kRankedShapeAlignment);  // W divides it: no finer step, none coarser
  CHECK(r8.n_min == 512);
  CHECK(r8.n_max == 2048);
  CHECK(r8.n_step == kRankedShapeAlignment);
  CHECK(by_w.RankedShapes(1).m_step == kRankedShapeAlignment);

  // No power-of-two step keeps M a multiple of 3 (and the default is not one): M stays fixed.
  const ShapeRange r3 = ShapedProblem(ShapedProblem::kMMultipleOf3).RankedShapes(2);
  CHECK(r3.m_min == 1024);
  CHECK(r3.m_max == 1024);
  CHECK(r3.n_max == 2048);

  // N changes no shape: timing it again would time the same work, so it stays fixed.
  const ShapeRange rn = ShapedProblem(ShapedProblem::kIgnoresN).RankedShapes(4);
  CHECK(rn.n_min == 1024);
  CHECK(rn.n_max == 1024);
  CHECK(rn.m_max == 2048);
}

TEST_CASE("the ranked shapes check fails a range the problem cannot run") {
  const ShapedProblem bad(ShapedProblem::kDeclaresTooMuch);
  CHECK_FALSE(CheckRankedShapes(bad, 2, bad.RankedShapes(2), 32).ok());
  const ShapedProblem good(ShapedProblem::kMDivisibleByW);
  CHECK(CheckRankedShapes(good, 8, good.RankedShapes(8), 32).ok());
  ShapeRange off_step = good.RankedShapes(8);
  off_step.m_step = 4;  // 1028 is not a multiple of 8
  CHECK_FALSE(CheckRankedShapes(good, 8, off_step, 256).ok());
  ShapeRange beyond = good.RankedShapes(8);
  beyond.n_max = 1 << 20;  // past max_n
  CHECK_FALSE(CheckRankedShapes(good, 8, beyond, 0).ok());
}

}  // namespace
}  // namespace pkb
