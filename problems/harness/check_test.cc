// The harness's comparison of a whole output set, in particular outputs of data-dependent length
// (OutputDecl::rows_from): the candidate's row count is checked first, then only the counted
// rows, and a reference that breaks its own declaration is an error, not a verdict.
#include "problems/hazards/hazards.h"

namespace pkb {
namespace {

// A test double: a problem with two ragged outputs sharing one row count, and a fixed one.
class RaggedToy : public Problem {
 public:
  const ProblemInfo& info() const override { return info_; }
  Inputs MakeInputs(const RunConfig&, int, int) const override { return {}; }
  std::vector<OutputDecl> Outputs(const RunConfig&, int) const override {
    return {{"ids", {8}, at::kLong, 2}, {"rows", {8, 3}, at::kFloat, 2}, {"count", {}, at::kLong},
            {"scale", {2}, at::kFloat}};
  }
  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm&, const Inputs&,
                                                    const RunConfig&) const override {
    return absl::UnimplementedError("not used");
  }
  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(
      const std::vector<Inputs>&, const RunConfig&) const override {
    return absl::UnimplementedError("not used");
  }
  Tolerance GetTolerance(const RunConfig&, int index) const override {
    Tolerance t;
    t.atol = t.rtol = 1e-3;
    t.exact = index == 0;
    if (index == 2) t.atol = 2;  // deliberately loose for the count: the harness makes it exact
    return t;
  }
  Roofline GetRoofline(const RunConfig&) const override { return {}; }

 private:
  ProblemInfo info_{999, "999_ragged_toy"};
};

// The reference's answer with `r` rows.
std::vector<at::Tensor> Expected(int64_t r) {
  auto ids = at::arange(r, at::kLong) * 7;
  auto rows = at::arange(r * 3, at::kFloat).reshape({r, 3}) / 3;
  return {ids, rows, at::scalar_tensor(r, at::kLong), at::full({2}, 0.5f)};
}

// A candidate's buffers at capacity, poisoned, with the first `r` rows of `want` written and
// `count` as its row count.
std::vector<at::Tensor> Candidate(const std::vector<at::Tensor>& want, int64_t r, int64_t count) {
  std::vector<at::Tensor> out = {at::empty({8}, at::kLong), at::empty({8, 3}, at::kFloat),
                                 at::empty({}, at::kLong), at::empty({2}, at::kFloat)};
  for (auto& t : out) Poison(t);
  out[0].narrow(0, 0, r).copy_(want[0].narrow(0, 0, r));
  out[1].narrow(0, 0, r).copy_(want[1].narrow(0, 0, r));
  out[2].fill_(count);
  out[3].copy_(want[3]);
  return out;
}

bool AllOk(const std::vector<v1::OutputCheck>& checks) {
  for (const auto& c : checks) {
    if (!c.ok()) return false;
  }
  return true;
}

TEST_CASE("ragged outputs: the counted rows are compared and the rest is never read") {
  RaggedToy p;
  RunConfig cfg;
  auto want = Expected(5);
  auto got = Candidate(want, 5, 5);
  auto checks = CompareOutputs(p, cfg, p.Outputs(cfg, 0), got, want);
  REQUIRE(checks.ok());
  CHECK(AllOk(*checks));
  CHECK((*checks)[1].numel() == 15);
  CHECK((*checks)[1].name() == "rows");
  CHECK((*checks)[1].unwritten_count() == 0);  // rows 5..7 hold poison and do not count

  // Zero rows received is a legal answer too.
  auto none = Expected(0);
  auto checks0 = CompareOutputs(p, cfg, p.Outputs(cfg, 0), Candidate(none, 0, 0), none);
  REQUIRE(checks0.ok());
  CHECK(AllOk(*checks0));
}

TEST_CASE("ragged outputs: a wrong, missing or oversized row count fails every counted output") {
  RaggedToy p;
  RunConfig cfg;
  auto want = Expected(5);
  for (int64_t count : {4, 6, 9, -1}) {
    auto got = Candidate(want, 5, count);
    auto checks = CompareOutputs(p, cfg, p.Outputs(cfg, 0), got, want);
    REQUIRE(checks.ok());
    CHECK_FALSE((*checks)[0].ok());
    CHECK_FALSE((*checks)[1].ok());
    CHECK((*checks)[1].problem().find("row count") != std::string::npos);
    CHECK_FALSE((*checks)[2].ok());
    CHECK((*checks)[3].ok());
  }
  // A count never written: the poison pattern is no count.
  auto got = Candidate(want, 5, 5);
  Poison(got[2]);
  auto checks = CompareOutputs(p, cfg, p.Outputs(cfg, 0), got, want);
  REQUIRE(checks.ok());
  CHECK_FALSE(AllOk(*checks));
}

TEST_CASE("ragged outputs: the count is exact whatever the problem's tolerance says") {
  RaggedToy p;
  RunConfig cfg;
  auto want = Expected(5);
  auto got = Candidate(want, 5, 6);  // within the count's declared atol of 2
  auto checks = CompareOutputs(p, cfg, p.Outputs(cfg, 0), got, want);
  REQUIRE(checks.ok());
  CHECK_FALSE((*checks)[2].ok());
}

TEST_CASE("ragged outputs: a wrong or unwritten counted row fails") {
  RaggedToy p;
  RunConfig cfg;
  auto want = Expected(5);
  auto got = Candidate(want, 5, 5);
  got[1][4][2] = want[1][4][2].item<float>() + 0.5f;
  auto checks = CompareOutputs(p, cfg, p.Outputs(cfg, 0), got, want);
  REQUIRE(checks.ok());
  CHECK_FALSE((*checks)[1].ok());
  CHECK((*checks)[1].first_bad_index() == 14);
  auto partial = Candidate(want, 4, 5);
  auto checks2 = CompareOutputs(p, cfg, p.Outputs(cfg, 0), partial, want);
  REQUIRE(checks2.ok());
  CHECK_FALSE((*checks2)[0].ok());
  CHECK_FALSE((*checks2)[1].ok());
}

TEST_CASE("a reference that breaks its declaration is an error, not a verdict") {
  RaggedToy p;
  RunConfig cfg;
  auto decls = p.Outputs(cfg, 0);
  auto over = Expected(9);  // capacity 8
  auto got = Candidate(Expected(8), 8, 9);
  CHECK_FALSE(CompareOutputs(p, cfg, decls, got, over).ok());
  auto inconsistent = Expected(5);
  inconsistent[2].fill_(4);  // count says 4, rows say 5
  CHECK_FALSE(CheckAgainstDeclaration(decls, inconsistent).ok());
  auto wrong_dtype = Expected(5);
  wrong_dtype[3] = wrong_dtype[3].to(at::kDouble);
  CHECK_FALSE(CheckAgainstDeclaration(decls, wrong_dtype).ok());
  auto missing = Expected(5);
  missing.pop_back();
  CHECK_FALSE(CheckAgainstDeclaration(decls, missing).ok());
  CHECK(CheckAgainstDeclaration(decls, Expected(5)).ok());
  CHECK(CheckAgainstDeclaration(decls, Expected(8)).ok());
}

}  // namespace
}  // namespace pkb

namespace pkb {
namespace {

TEST_CASE("atol_mean_abs: the slack follows the output's mean size, and adds to the outliers'") {
  // mean |expected| over the nonzero elements = (1 + 2 + 3) / 3 = 2: atol = 0.1 * 2 = 0.2 on
  // every element (the zeros do not dilute it).
  at::Tensor want = at::tensor({0.f, 1.f, -2.f, 3.f, 0.f, 0.f});
  Tolerance t{0, 0, false, ""};
  t.atol_mean_abs = 0.1;
  at::Tensor got = want.clone();
  got[0] = 0.19f;  // the element whose expected value is 0 still gets the output's slack
  got[3] = 3.19f;
  v1::OutputCheck c = CompareOutput(got, want, t);
  CHECK(c.ok());
  CHECK(c.atol() == Approx(0.2));
  got[0] = 0.21f;
  CHECK_FALSE(CompareOutput(got, want, t).ok());
  // An all-zero expected output gets no slack: anything but zeros fails.
  at::Tensor zeros = at::zeros({4});
  CHECK(CompareOutput(zeros.clone(), zeros, t).ok());
  CHECK_FALSE(CompareOutput(at::full({4}, 1e-6f), zeros, t).ok());
  // The outlier bound gets the same slack: one element within 0.2 + 0.5 passes as an outlier.
  t.outlier_fraction = 0.2;  // ceil(1.2): one element
  t.outlier_atol = 0.5;
  got = want.clone();
  got[1] = 1.65f;
  CHECK(CompareOutput(got, want, t).ok());
  got[1] = 1.75f;
  CHECK_FALSE(CompareOutput(got, want, t).ok());
}

}  // namespace
}  // namespace pkb

namespace pkb {
namespace {

TEST_CASE("PoisonPattern names the bytes Poison writes, for every dtype and both variants") {
  for (at::ScalarType dtype :
       {at::kFloat, at::kHalf, at::kBFloat16, at::kDouble, at::kFloat8_e4m3fn, at::kFloat8_e5m2,
        at::kBool, at::kComplexFloat, at::kComplexDouble, at::kByte, at::kChar, at::kShort,
        at::kInt, at::kLong}) {
    for (int variant : {0, 1}) {
      at::Tensor t = at::zeros({5}, at::TensorOptions().dtype(dtype));
      Poison(t, variant);
      const PoisonFill fill = PoisonPattern(dtype, variant);
      const auto* bytes = static_cast<const uint8_t*>(t.data_ptr());
      const size_t n = static_cast<size_t>(t.nbytes());
      INFO(c10::toString(dtype) << " variant " << variant);
      REQUIRE(n % fill.bytes == 0);
      size_t differ = 0;
      for (size_t i = 0; i < n; ++i)
        differ += bytes[i] != static_cast<uint8_t>(fill.bits >> (8 * (i % fill.bytes)));
      CHECK(differ == 0);
    }
  }
}

}  // namespace
}  // namespace pkb
