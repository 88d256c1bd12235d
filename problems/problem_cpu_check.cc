// Runs every problem's reference on CPU through OpenMPI and holds it to the problem's
// single-process oracle, then checks that the candidate tolerance rejects the standard wrong
// answers. Started by CTest as `mpirun -np W problem_cpu_check --problem ID`.
//
// With --device cuda (GPU nodes), rank r draws its inputs on GPU r mod G and runs the reference
// there, its collectives through host-staged MPI (--staged, as the judges of a functional run
// call them: the ranks may share one GPU), and the oracle runs on that GPU too.
//
// Wrong answers, each of which must fail on at least one rank (where it differs from the truth):
//   zeros, noise of the right magnitude, an input echoed back, the previous input set's
//   outputs, and each rank's contribution missing (the oracle with that rank's inputs zeroed).
#include <ATen/Parallel.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/DeviceGuard.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "problems/harness/check.h"
#include "problems/harness/comm_mpi.h"
#include "problems/harness/comm_staged.h"
#include "problems/harness/inputs.h"
#include "problems/harness/registry.h"
#include "problems/harness/ties.h"

namespace pkb {
namespace {

int failures = 0;
int passes = 0;

void Report(bool ok, const std::string& what) {
  if (ok) {
    ++passes;
  } else {
    ++failures;
    std::fprintf(stderr, "FAIL rank %d: %s\n", MpiWorldRank(), what.c_str());
  }
}

// Flattened first: a 0-dim tensor cannot be viewed as bytes of another element size.
bool Identical(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
         at::equal(a.contiguous().reshape({-1}).view(at::kByte),
                   b.contiguous().reshape({-1}).view(at::kByte));
}

std::string Describe(const v1::OutputCheck& c) {
  return absl::StrCat("bad ", c.bad_count(), "/", c.numel(), ", max abs ", c.max_abs_error(),
                      ", first bad ", c.first_bad_index(), " expected ", c.expected_at_first_bad(),
                      " got ", c.actual_at_first_bad(), c.problem().empty() ? "" : ", ",
                      c.problem());
}

// `wrong` must be rejected wherever it differs from `truth`.
void ExpectRejected(const Problem& p, const RunConfig& cfg, int index, const at::Tensor& wrong,
                    const at::Tensor& truth, const std::string& name, bool* any_rejected,
                    bool* any_different) {
  if (Identical(wrong, truth)) return;
  *any_different = true;
  v1::OutputCheck c = CompareOutput(wrong, truth, p.GetTolerance(cfg, index));
  if (!c.ok()) *any_rejected = true;
}

void CheckProblem(const Problem& p, RunConfig cfg, int sets, bool staged) {
  int rank = MpiWorldRank();
  absl::Status runnable = CheckRunnable(p, cfg);
  if (!runnable.ok()) {
    std::printf("rank %d: %s: skipped by its own constraint: %s\n", rank, p.info().slug.c_str(),
                std::string(runnable.message()).c_str());
    return;
  }
  auto world = MakeMpiWorld(p.Groups(cfg));
  if (!world.ok()) return Report(false, std::string(world.status().message()));
  // Through host-staged copies, as the judges of ranks that share a GPU call it.
  if (staged) *world = std::make_unique<StagedComm>(std::move(*world), cfg.device);

  std::vector<std::vector<std::vector<at::Tensor>>> oracle_by_set;
  for (int set = 0; set < sets; ++set) {
    Inputs mine = DrawInputs(p, cfg, rank, set);
    Inputs pristine;
    for (size_t i = 0; i < mine.tensors.size(); ++i) pristine.Add(mine.names[i], mine[i].clone());
    auto ref = p.Reference(**world, mine, cfg);
    if (!ref.ok())
      return Report(false, absl::StrCat(p.info().slug, " reference: ", ref.status().message()));
    for (size_t i = 0; i < mine.tensors.size(); ++i) {
      Report(Identical(mine[i], pristine[i]),
             absl::StrCat(p.info().slug, ": reference modified input ", mine.names[i]));
    }
    std::vector<Inputs> all = DrawAllInputs(p, cfg, set);
    auto oracle = p.Oracle(all, cfg);
    if (!oracle.ok())
      return Report(false, absl::StrCat(p.info().slug, " oracle: ", oracle.status().message()));
    const auto& want = (*oracle)[rank];
    auto decls = p.OutputsOfSet(cfg, rank, set);
    Report(ref->size() == want.size() && ref->size() == decls.size(),
           absl::StrCat(p.info().slug,
                        ": reference, oracle and declaration disagree on the number of outputs"));
    if (ref->size() != want.size() || ref->size() != decls.size()) return;
    absl::Status declared = CheckAgainstDeclaration(decls, *ref);
    Report(declared.ok(), absl::StrCat(p.info().slug, " W=", cfg.world, " set ", set,
                                       ": reference vs declaration: ", declared.message()));
    for (size_t i = 0; i < want.size(); ++i) {
      const at::Tensor& got = (*ref)[i];
      v1::OutputCheck c = CompareOutput(got, want[i], p.OracleTolerance(cfg, i));
      Report(c.ok(), absl::StrCat(p.info().slug, " W=", cfg.world, " set ", set, " output ", i,
                                  ": reference != oracle: ", Describe(c)));
    }

    // A tie rule's keys: the collective computation against the one-process one, and the
    // reference's own answer resolving onto itself.
    if (const TieRule* rule = TieRuleOf(p)) {
      auto keys = rule->TieKeys(**world, pristine, cfg, *ref);
      auto oracle_keys = rule->OracleTieKeys(all, cfg, *oracle);
      Report(keys.ok() && oracle_keys.ok(),
             absl::StrCat(p.info().slug, " W=", cfg.world, " set ", set, ": tie keys: ",
                          keys.ok() ? oracle_keys.status().message() : keys.status().message()));
      if (!keys.ok() || !oracle_keys.ok()) return;
      const auto& want_keys = (*oracle_keys)[rank];
      Report(keys->size() == want_keys.size() && !keys->empty(),
             absl::StrCat(p.info().slug, ": TieKeys and OracleTieKeys disagree on the count"));
      for (size_t k = 0; k < keys->size() && k < want_keys.size(); ++k) {
        Report(Identical((*keys)[k], want_keys[k]),
               absl::StrCat(p.info().slug, " W=", cfg.world, " set ", set, " tie key ", k,
                            ": TieKeys != OracleTieKeys"));
      }
      auto resolved = rule->ResolveTies(cfg, *ref, *keys, *ref);
      Report(resolved.ok() && resolved->size() == ref->size(),
             absl::StrCat(p.info().slug, ": ResolveTies of the reference's outputs failed"));
      for (size_t i = 0; resolved.ok() && i < resolved->size() && i < ref->size(); ++i) {
        Report(Identical((*resolved)[i], (*ref)[i]),
               absl::StrCat(p.info().slug, " W=", cfg.world, " set ", set, " output ", i,
                            ": ResolveTies moves the reference's own answer"));
      }
    }

    // The tolerance's strength does not depend on how the collectives travel, and needs each
    // problem's own test shape (Problem::CpuTestShape): the plain runs check it.
    if (staged) {
      oracle_by_set.push_back(std::move(*oracle));
      continue;
    }

    // Each rank's contribution missing: the oracle with that rank's floating inputs zeroed,
    // computed once per rank for all outputs (the other ranks' inputs are shared, not redrawn).
    std::vector<absl::StatusOr<std::vector<std::vector<at::Tensor>>>> missing_oracles;
    for (int missing = 0; cfg.world > 1 && missing < cfg.world; ++missing) {
      std::vector<Inputs> dropped = all;
      for (auto& t : dropped[missing].tensors) {
        if (t.is_floating_point()) t = at::zeros_like(t);
      }
      missing_oracles.push_back(p.Oracle(dropped, cfg));
    }

    // Standard wrong answers, checked against the reference's own outputs.
    for (size_t i = 0; i < want.size(); ++i) {
      const at::Tensor& truth = (*ref)[i];
      if (truth.numel() == 0) continue;
      auto check = [&](const at::Tensor& wrong, const std::string& name) {
        bool rejected = false, different = false;
        ExpectRejected(p, cfg, i, wrong, truth, name, &rejected, &different);
        Report(!different || rejected,
               absl::StrCat(p.info().slug, " W=", cfg.world, " set ", set, " output ", i,
                            ": wrong answer '", name, "' passed the tolerance"));
      };
      check(at::zeros_like(truth), "all zeros");
      if (truth.is_floating_point()) {
        at::Tensor f = truth.to(at::kFloat);
        double sd = std::max(f.std().item<double>(), 1e-3);
        check((at::randn_like(f) * sd + f.mean()).to(truth.scalar_type()),
              "noise of the right magnitude");
      }
      for (const auto& t : pristine.tensors) {
        if (t.sizes() == truth.sizes()) check(t.to(truth.scalar_type()), "input echoed");
      }
      if (set > 0) {
        const auto& prev = oracle_by_set[set - 1][rank];
        if (i < prev.size() && prev[i].sizes() == truth.sizes())
          check(prev[i], "previous set's outputs");
      }
      if (cfg.world > 1 && p.RankMissingDetectable(cfg, set, static_cast<int>(i))) {
        for (int missing = 0; missing < cfg.world; ++missing) {
          const auto& o = missing_oracles[missing];
          // Where this rank's result does not depend on the dropped rank (a causal mask, a
          // non-root rank), the oracle is unchanged and there is nothing to reject.
          if (o.ok() && i < (*o)[rank].size() && !Identical((*o)[rank][i], want[i])) {
            check((*o)[rank][i], absl::StrCat("rank ", missing, "'s contribution missing"));
          }
        }
      }
    }
    oracle_by_set.push_back(std::move(*oracle));
  }
}

}  // namespace
}  // namespace pkb

int main(int argc, char** argv) {
  CLI::App app{"Checks problem references against their oracles through MPI (run under mpirun)."};
  int problem = 0;
  int64_t m = 0, n = 0;
  int sets = 0;
  app.add_option("--problem", problem, "problem id (0: all)");
  CLI::Option* m_given =
      app.add_option("--m", m, "base rows (default: the problem's CpuTestShape)");
  CLI::Option* n_given =
      app.add_option("--n", n, "base columns (default: the problem's CpuTestShape)");
  CLI::Option* sets_given =
      app.add_option("--sets", sets, "input sets to check (default: the problem's CpuTestShape)");
  bool staged = false;
  app.add_flag("--staged", staged,
               "run the references through StagedComm (ranks sharing a GPU); the wrong answers "
               "are left to the plain runs");
  std::string device = "cpu";
  app.add_option("--device", device, "cpu, or cuda: rank r on GPU r mod G (implies --staged)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  CLI11_PARSE(app, argc, argv);
  at::Device where(at::kCPU);
  if (device == "cuda") {
    const int gpus = at::detail::getCUDAHooks().deviceCount();
    if (gpus < 1) {
      std::fprintf(stderr, "--device cuda: no CUDA device (or a build without CUDA)\n");
      return 2;
    }
    where = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(pkb::MpiWorldRank() % gpus));
    staged = true;  // NCCL refuses two ranks of one communicator on one GPU
  }
  c10::DeviceGuard on_device(where);

  int world = pkb::MpiWorldSize();
  std::vector<const pkb::Problem*> todo;
  if (problem == 0) {
    todo = pkb::AllProblems();
  } else {
    auto p = pkb::FindProblem(problem);
    if (!p.ok()) {
      std::fprintf(stderr, "%s\n", std::string(p.status().message()).c_str());
      return 2;
    }
    todo.push_back(*p);
  }
  at::set_num_threads(1);
  for (const auto* p : todo) {
    const pkb::TestShape shape = p->CpuTestShape();
    pkb::RunConfig cfg;
    cfg.m = m_given->count() > 0 ? m : shape.m;
    cfg.n = n_given->count() > 0 ? n : shape.n;
    cfg.world = world;
    cfg.device = where;
    pkb::CheckProblem(*p, cfg, sets_given->count() > 0 ? sets : shape.sets, staged);
  }
  int local[2] = {pkb::passes, pkb::failures}, total[2] = {0, 0};
  MPI_Reduce(local, total, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (pkb::MpiWorldRank() == 0) std::printf("%d passed, %d failed\n", total[0], total[1]);
  int any = total[1] > 0;
  MPI_Bcast(&any, 1, MPI_INT, 0, MPI_COMM_WORLD);
  // Leave without static destructors, as pkb-rank does: with CUDA, libtorch's abort at exit
  // (a double free in its operator registry's teardown; seen on the H200, 2026-12-05, after
  // every check had passed).
  std::fflush(stdout);
  std::fflush(stderr);
  pkb::FinalizeMpi();
  std::_Exit(any ? 1 : 0);
}
