// Shared pieces of the hazard tests: each problem's numerics hazards, checked against its oracle
// with the candidate tolerance. Plausible correct alternatives (another rounding or accumulation
// scheme) must pass, plausible mistakes must fail. problem_cpu_check covers the generic wrong
// answers (zeros, noise, echoed inputs, a rank missing); the files beside this one cover what is
// particular to one problem. No MPI: the oracle holds every rank's inputs.
#pragma once

// libtorch before Catch2: both define CHECK, and the tests must get Catch2's.
#include "problems/harness/check.h"
#include "problems/harness/inputs.h"
#include "problems/harness/registry.h"

#include <catch2/catch.hpp>

#include <utility>
#include <vector>

namespace pkb::hazards {

struct Case {
  const Problem* p;
  RunConfig cfg;
  std::vector<Inputs> all;
  std::vector<std::vector<at::Tensor>> truth;  // per rank, the oracle's outputs
};

// Rank inputs of input set `set` and the oracle's outputs for problem `id` at (m, n, world).
inline Case Prepare(int id, int64_t m, int64_t n, int world, int set = 0) {
  auto p = FindProblem(id);
  REQUIRE(p.ok());
  Case c;
  c.p = *p;
  c.cfg.m = m;
  c.cfg.n = n;
  c.cfg.world = world;
  REQUIRE(CheckRunnable(*c.p, c.cfg).ok());
  c.all = DrawAllInputs(*c.p, c.cfg, set);
  auto o = c.p->Oracle(c.all, c.cfg);
  REQUIRE(o.ok());
  c.truth = std::move(*o);
  return c;
}

// Whether `got` passes as output `index` under the problem's tolerance.
inline bool Passes(const Case& c, int index, const at::Tensor& got, const at::Tensor& want) {
  return CompareOutput(got, want, c.p->GetTolerance(c.cfg, index)).ok();
}

// PKB's own check: atol = rtol = 1e-2.
inline bool PassesPkb(const at::Tensor& got, const at::Tensor& want) {
  return CompareOutput(got, want, Tolerance{}).ok();
}

// Bitwise equality of shape, dtype and bytes; holds for 0-dim tensors too.
inline bool Same(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
         at::equal(a.contiguous().reshape({-1}).view(at::kByte),
                   b.contiguous().reshape({-1}).view(at::kByte));
}

}  // namespace pkb::hazards
