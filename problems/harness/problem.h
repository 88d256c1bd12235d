// The problem library's contract: what one PKB problem declares, so that the shared harness can
// generate its inputs, run its reference, check a candidate and time both.
//
// A problem is one small file (problems/<category>/pNNN_<slug>.cc) that defines a subclass of
// Problem and registers it:
//
//   class AllReduce : public Problem { ... };
//   PKB_REGISTER_PROBLEM(AllReduce);
//
// Like an nccl-tests collective, the file says only what is particular to the problem: the
// harness seeds the generators, allocates and poisons outputs, compares, times and reports.
//
// Thread-safety: Problem objects are immutable after registration; every method is const.
#ifndef PKB_PROBLEMS_HARNESS_PROBLEM_H_
#define PKB_PROBLEMS_HARNESS_PROBLEM_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/status_macros.h"
#include "problems/harness/comm.h"

namespace pkb {

// The run's base shape and dtype (PKB's --rows, --cols, --dtype) and the world size.
struct RunConfig {
  int64_t m = 1024;
  int64_t n = 1024;
  at::ScalarType dtype = at::kBFloat16;
  int world = 1;
  at::Device device = at::kCPU;  // where inputs are drawn and the reference runs
};

// A non-tensor argument of the reference (a Python number there).
struct ScalarArg {
  std::string name;
  bool is_int = true;
  int64_t i = 0;
  double f = 0;
  static ScalarArg Int(std::string name, int64_t v) {
    return {std::move(name), true, v, double(v)};
  }
  static ScalarArg Float(std::string name, double v) { return {std::move(name), false, 0, v}; }
};

// One rank's arguments to the reference, in call order.
struct Inputs {
  std::vector<at::Tensor> tensors;
  std::vector<std::string> names;  // same length as tensors
  std::vector<ScalarArg> scalars;
  void Add(std::string name, at::Tensor t) {
    names.push_back(std::move(name));
    tensors.push_back(std::move(t));
  }
  const at::Tensor& operator[](size_t i) const { return tensors[i]; }
};

// An output the candidate must produce: exact shape and dtype.
//
// Outputs whose length depends on the data (rows received by an all-to-all-v) name a row count:
// with `rows_from` = k, shape[0] is a capacity the problem guarantees is never exceeded, and the
// candidate writes the number of rows it produced into output k, a 0-d int64 output that the
// reference returns too and that is compared exactly. Only the first rows are compared (and
// must be written); the reference returns exactly those rows. Several outputs may share one
// count. -1: the shape is exact.
struct OutputDecl {
  std::string name;
  std::vector<int64_t> shape;
  at::ScalarType dtype;
  int rows_from = -1;
};

// How an output is compared: |actual - expected| <= atol + rtol * |expected| element-wise, or
// bit-exact. `rationale` says why these numbers (it is shown to agents).
struct Tolerance {
  double atol = 1e-2;
  double rtol = 1e-2;
  bool exact = false;
  std::string rationale = "PKB's default for bf16: atol = rtol = 1e-2.";
  // An outlier budget, for outputs where a correct candidate may miss the bound above on a few
  // elements by a bounded amount (an Adam step's sign where the averaged gradient is zero within
  // rounding): up to ceil(outlier_fraction * numel) elements may exceed atol + rtol * |expected|
  // if every element stays within outlier_atol + outlier_rtol * |expected|. 0: no outliers.
  double outlier_fraction = 0;
  double outlier_atol = 0;
  double outlier_rtol = 0;
  // Added to atol (and outlier_atol): this multiple of the mean |expected| over the output's
  // nonzero elements (all zeros: no slack), for errors that follow the size of the terms summed,
  // not the element's own: an element of a sum that cancels is small but carries the rounding
  // of its large terms. 0: none.
  double atol_mean_abs = 0;
};

// A named sub-group layout: the disjoint rank sets that `name` splits WORLD into.
struct GroupLayout {
  std::string name;
  std::vector<std::vector<int>> partition;
};

// Per-rank work at the run's shape, for rooflines (bandwidth-optimal algorithms).
struct Roofline {
  double nvlink_bytes = 0;  // bytes sent per rank over the interconnect
  double hbm_bytes = 0;     // bytes read + written per rank, at least
  double flops = 0;         // per rank
  // Collectives: the size S that nccl-tests divides by the time for algbw, and the factor that
  // turns algbw into busbw (all-reduce 2(W-1)/W, all-gather and reduce-scatter (W-1)/W, ...).
  double collective_bytes = 0;
  double busbw_factor = 0;
};

// The shape and input sets the CPU tests check a problem at (problem_cpu_check when no --m, --n
// or --sets is given).
struct TestShape {
  int64_t m = 64;
  int64_t n = 64;
  int sets = 2;
};

// The shapes ranked runs are also timed at, at one world size (pkb.v1.ShapeRange): m in
// {m_min, m_min + m_step, ..., m_max}, n likewise. A dimension the problem cannot vary has
// min = max = the default shape's.
struct ShapeRange {
  int64_t m_min = 0, m_max = 0, m_step = 1;
  int64_t n_min = 0, n_max = 0, n_step = 1;
};

struct ProblemInfo {
  int id = 0;
  std::string slug;       // "1_allreduce"
  int version = 1;        // bump when inputs, reference or tolerance change
  std::string origin;     // where the code comes from
  std::string category;   // "collective", "tensor parallel", ...
  std::string statement;  // markdown for agents: computation, inputs, outputs, hazards
};

class Problem {
 public:
  virtual ~Problem() = default;

  virtual const ProblemInfo& info() const = 0;

  // Rejects world sizes and shapes the problem cannot run, before anything starts, with the
  // precise reason (CUTLASS's can_implement). The default accepts everything.
  virtual absl::Status CanImplement(const RunConfig& cfg) const { return absl::OkStatus(); }

  // The CPU tests' shape: 64 x 64 and two input sets, unless the problem's constraints exclude
  // that shape or make it trivial; an override says why beside it.
  virtual TestShape CpuTestShape() const { return {}; }

  // The world sizes among 1, 2, 4, 8 that the problem runs at, at the default shape: what
  // CanImplement accepts there, said where agents and schedulers can read it (the catalog's
  // world_sizes); a test holds the two to agreement.
  virtual std::vector<int> WorldSizes() const { return {1, 2, 4, 8}; }

  // The shapes ranked runs at world size `world` are also timed at (the catalog's
  // WorldLayout.ranked_shapes; docs/leaderboard.md, "Shape runs"). Every shape in it must pass
  // CheckRunnable; a test holds it to that. The default derives it from CanImplement and the
  // signature (DeriveRankedShapes, problems/harness/shapes.h); override only where that
  // derivation is wrong for the problem, and say why beside the override. Called for world sizes
  // the problem runs at.
  virtual ShapeRange RankedShapes(int world) const;

  // Sub-groups besides WORLD (TP, EP, CP, ...). The harness builds one communicator per group.
  virtual std::vector<GroupLayout> Groups(const RunConfig& cfg) const { return {}; }

  // The seed of rank `rank` in trial `trial`. PKB's formula by default.
  virtual uint64_t Seed(int rank, int set) const {
    return 42 + 1000ull * info().id + rank + 1000003ull * set;
  }

  // Draws one rank's inputs for input set `set`. The harness has already seeded every generator
  // with Seed(rank, set); draw with the same ops, shapes, dtypes, devices and order as PKB, so
  // that set t is PKB's trial t. Problems whose PKB inputs are fixed (no RNG) or make a weak
  // test keep PKB's inputs for set 0 and draw stronger, seeded inputs for the other sets, so
  // that a candidate cannot pass by producing a constant answer.
  virtual Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const = 0;

  // The outputs of rank `rank`, in the reference's return order (for input set 0).
  virtual std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const = 0;

  // The outputs on input set `set`, for problems whose output shapes depend on the set (a
  // trial's per-rank counts, empty shards on some trials). The harness allocates from this.
  virtual std::vector<OutputDecl> OutputsOfSet(const RunConfig& cfg, int rank, int set) const {
    return Outputs(cfg, rank);
  }

  // The reference: libtorch math and collectives through `comm` (NCCL on GPU, MPI on CPU).
  // Must not modify `in` (clone first where PKB's reference works in place).
  virtual absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                            const RunConfig& cfg) const = 0;

  // The same global result computed in one process from every rank's inputs, with no
  // collective: result[r] is rank r's outputs. Tests hold Reference to it at W = 1, 2, 4, 8.
  virtual absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(
      const std::vector<Inputs>& all, const RunConfig& cfg) const = 0;

  // Tolerance of output `index` (default: PKB's 1e-2).
  virtual Tolerance GetTolerance(const RunConfig& cfg, int index) const { return {}; }

  // Tolerance used when checking Reference against Oracle in CPU tests; the default is the
  // candidate tolerance. Problems whose oracle sums in another order than the collective loosen
  // it here with a reason.
  virtual Tolerance OracleTolerance(const RunConfig& cfg, int index) const {
    return GetTolerance(cfg, index);
  }

  // Whether the CPU tests' wrong answer "one rank's floating inputs zeroed" must fail output
  // `index` on input set `set`. A problem answers false only where that answer lies, on those
  // inputs, within the rounding the tolerance must admit for correct candidates (PKB's own set-0
  // inputs can make a rank's share of a scalar vanish); its stronger sets keep the check.
  virtual bool RankMissingDetectable(const RunConfig& cfg, int set, int index) const {
    return true;
  }

  virtual Roofline GetRoofline(const RunConfig& cfg) const = 0;
};

// Bytes per element of a dtype.
inline double ElementBytes(at::ScalarType t) { return static_cast<double>(c10::elementSize(t)); }

}  // namespace pkb

#endif  // PKB_PROBLEMS_HARNESS_PROBLEM_H_
