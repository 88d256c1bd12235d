// Hazard tests of 40-43 and 47: the DDP / ZeRO / FSDP Adam steps (see hazards.h and
// problems/dp/adam.h), and the outlier budget of the tolerance they use.
#include "problems/hazards/hazards.h"

namespace pkb::hazards {
namespace {

TEST_CASE("outlier budget: a few elements may use the looser bound, no more", "[check]") {
  at::Tensor want = at::zeros({1000}, at::kFloat);
  Tolerance t{1e-3, 0, false, ""};
  t.outlier_fraction = 2e-3;  // ceil(2) elements
  t.outlier_atol = 1e-2;
  at::Tensor got = want.clone();
  got[3] = 5e-3;
  got[700] = -9e-3;
  CHECK(CompareOutput(got, want, t).ok());
  got[900] = 5e-3;  // a third outlier
  CHECK_FALSE(CompareOutput(got, want, t).ok());
  got[900] = 0;
  got[3] = 2e-2;  // outside the looser bound
  CHECK_FALSE(CompareOutput(got, want, t).ok());
  t.outlier_fraction = 0;
  got[3] = 5e-3;
  CHECK_FALSE(CompareOutput(got, want, t).ok());
  got.fill_(NAN);  // NaN never passes
  t.outlier_fraction = 1;
  CHECK_FALSE(CompareOutput(got, want, t).ok());
}

}  // namespace
}  // namespace pkb::hazards
