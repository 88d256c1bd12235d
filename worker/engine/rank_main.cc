// pkb-rank: one rank process of an evaluation. The engine starts W of them (directly on GPU
// nodes, under mpirun on CPU machines). Each one draws its inputs, runs the candidate and then
// the reference (never before: the reference's outputs must not sit in this process's memory
// while the candidate runs), compares every output, times both, and writes a RankReport.
//
// Progress lines for the engine go to stdout from rank 0 only: "PKB-PROGRESS <json>".
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pkb/v1/result.pb.h"
#include "problems/harness/check.h"
#include "problems/harness/inputs.h"
#include "problems/harness/registry.h"
#include "worker/engine/candidate_loader.h"
#include "worker/engine/rank_device.h"

namespace pkb {
namespace {

struct RankOptions {
  int problem = 1;
  int64_t m = 1024, n = 1024;
  std::string dtype = "bfloat16";
  int rank = -1, world = -1;
  std::string backend = "cuda";
  std::string candidate;  // .so; empty: time the reference only
  std::string report;     // where to write this rank's RankReport (binary)
  std::string rendezvous;
  int trials = 5;
  int warmup = 500;
  int iters = 100;
  int64_t set_offset = 0;    // secret seed offset for ranked runs
  double l2_multiple = 3.0;  // timed input sets together exceed this many L2s
  int max_sets = 128;
  int spot_checks = 3;
  bool baseline = true;
};

// The harness state behind pkb_context::harness.
struct Harness {
  RankDevice* device = nullptr;
  Comm* comm = nullptr;
  std::string error;
  std::vector<pkb_group> groups;
  std::vector<std::vector<int32_t>> group_ranks;
  std::vector<std::string> group_names;
};

Harness* H(pkb_context* ctx) { return static_cast<Harness*>(ctx->harness); }

int CtxSymmAlloc(pkb_context* ctx, size_t bytes, pkb_symm* out) {
  return H(ctx)->device->SymmAlloc(bytes, out, &H(ctx)->error);
}
int CtxBarrier(pkb_context* ctx) {
  absl::Status s = H(ctx)->comm->Barrier();
  if (!s.ok()) H(ctx)->error = std::string(s.message());
  return s.ok() ? 0 : 1;
}
void CtxSetError(pkb_context* ctx, const char* message) {
  H(ctx)->error = std::string(message ? message : "").substr(0, 4096);
}
void CtxLog(pkb_context* ctx, const char* message) {
  static int lines = 0;
  if (++lines <= 100) std::fprintf(stderr, "[candidate rank %d] %.1000s\n", ctx->rank, message);
}
const pkb_group* CtxGroup(pkb_context* ctx, const char* name) {
  auto* h = H(ctx);
  for (size_t i = 0; i < h->groups.size(); ++i) {
    if (h->group_names[i] == name) return &h->groups[i];
  }
  return nullptr;
}

void Progress(int rank, const std::string& json) {
  if (rank != 0) return;
  std::printf("PKB-PROGRESS %s\n", json.c_str());
  std::fflush(stdout);
}

struct OutputSet {
  std::vector<at::Tensor> tensors;
};

// Outputs with a data-dependent row count are allocated at their capacity.
OutputSet AllocateOutputs(const Problem& p, const RunConfig& cfg, int rank, int set) {
  OutputSet o;
  for (const auto& d : p.OutputsOfSet(cfg, rank, set)) {
    o.tensors.push_back(at::empty(d.shape, at::TensorOptions().dtype(d.dtype).device(cfg.device)));
  }
  return o;
}

class RankRunner {
 public:
  RankRunner(const RankOptions& o, const Problem& p, RunConfig cfg, RankDevice* dev, Comm* comm,
             Candidate cand, pkb_context* ctx)
      : o_(o), p_(p), cfg_(cfg), dev_(dev), comm_(comm), cand_(cand), ctx_(ctx) {}

  // Runs the candidate once; an error names what went wrong.
  absl::Status CallCandidate(const Inputs& in, OutputSet& out) {
    std::vector<pkb_tensor> ti, to;
    for (const auto& t : in.tensors) {
      PKB_ASSIGN_OR_RETURN(auto x, ToPkbTensor(t));
      ti.push_back(x);
    }
    for (const auto& t : out.tensors) {
      PKB_ASSIGN_OR_RETURN(auto x, ToPkbTensor(t));
      to.push_back(x);
    }
    auto scalars = ToPkbScalars(in.scalars);
    H(ctx_)->error.clear();
    int rc = cand_.run(ctx_, ti.data(), static_cast<int>(ti.size()), scalars.data(),
                       static_cast<int>(scalars.size()), to.data(), static_cast<int>(to.size()));
    if (rc != 0) {
      return absl::AbortedError(absl::StrCat("pkb_run returned ", rc,
                                             H(ctx_)->error.empty() ? "" : ": ", H(ctx_)->error));
    }
    return absl::OkStatus();
  }

  // Every rank agrees: true only if `ok` holds on all of them.
  absl::StatusOr<bool> AllOk(bool ok) {
    at::Tensor t =
        at::full({1}, ok ? 0 : 1, at::TensorOptions().dtype(at::kInt).device(cfg_.device));
    PKB_RETURN_IF_ERROR(comm_->AllReduce(t, ReduceOp::kSum));
    return t.item<int>() == 0;
  }

  absl::StatusOr<bool> Verify(v1::RankReport* report) {
    auto t0 = std::chrono::steady_clock::now();
    bool all_ok = true;
    for (int trial = 0; trial < o_.trials; ++trial) {
      int set = static_cast<int>(trial + o_.set_offset);
      Inputs in = DrawInputs(p_, cfg_, comm_->rank(), set);
      Inputs pristine;
      for (size_t i = 0; i < in.tensors.size(); ++i) pristine.Add(in.names[i], in[i].clone());
      pristine.scalars = in.scalars;
      OutputSet out = AllocateOutputs(p_, cfg_, comm_->rank(), set);
      for (auto& t : out.tensors) Poison(t, trial % 2);
      PKB_RETURN_IF_ERROR(comm_->Barrier());
      v1::RankTrial* rt = report->add_trials();
      rt->set_rank(comm_->rank());
      rt->set_trial(trial);
      absl::Status run = CallCandidate(in, out);
      if (run.ok()) run = dev_->Synchronize();
      if (!run.ok()) {
        rt->set_error(std::string(run.message()));
        report->set_status(v1::RUNTIME_ERROR);
        report->set_message(
            absl::StrCat("rank ", comm_->rank(), " trial ", trial, ": ", run.message()));
        return false;  // the process state is suspect: stop here
      }
      // Only now does the reference run, on the untouched copy of the inputs.
      PKB_ASSIGN_OR_RETURN(auto expected, p_.Reference(*comm_, pristine, cfg_));
      PKB_RETURN_IF_ERROR(dev_->Synchronize());
      bool ok = true;
      for (size_t i = 0; i < in.tensors.size(); ++i) {
        if (!at::equal(in[i], pristine[i])) {
          ok = false;
          rt->set_error(absl::StrCat("the candidate modified its input '", in.names[i], "'"));
        }
      }
      PKB_ASSIGN_OR_RETURN(
          auto checks, CompareOutputs(p_, cfg_, p_.OutputsOfSet(cfg_, comm_->rank(), set),
                                      out.tensors, expected, trial % 2));
      for (auto& c : checks) {
        ok = ok && c.ok();
        *rt->add_outputs() = std::move(c);
      }
      for (auto& e : expected) Poison(e, 0);  // no answer is left behind in freed memory
      rt->set_ok(ok);
      PKB_ASSIGN_OR_RETURN(bool everyone, AllOk(ok));
      Progress(comm_->rank(),
               absl::StrFormat("{\"trial\": %d, \"ok\": %s}", trial, everyone ? "true" : "false"));
      if (!everyone) {
        all_ok = false;
        if (!ok) {
          report->set_status(v1::MISMATCH);
          report->set_message(absl::StrCat(
              "rank ", comm_->rank(), " trial ", trial, ": ",
              rt->error().empty() ? "output differs from the reference" : rt->error()));
        }
        break;
      }
    }
    report->set_stage_verify_seconds(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return all_ok;
  }

  // Bytes of one input set with its outputs.
  int64_t SetBytes() {
    int64_t bytes = 0;
    Inputs in = DrawInputs(p_, cfg_, comm_->rank(), 0);
    for (const auto& t : in.tensors) bytes += t.nbytes();
    for (const auto& d : p_.OutputsOfSet(cfg_, comm_->rank(), 0)) {
      int64_t n = 1;
      for (auto s : d.shape) n *= s;
      bytes += n * c10::elementSize(d.dtype);
    }
    return std::max<int64_t>(bytes, 1);
  }

  // How many distinct input sets the timed iterations rotate through: one per timed iteration,
  // so that no timed call sees contents it has seen before (a candidate that keeps its outputs
  // and replays them on known inputs gains nothing), and together more than `l2_multiple` L2s;
  // at most `max_sets`, and what a quarter of the free memory holds (at most 16 GiB). Where that
  // is fewer than the timed iterations, the sets are reused in turn and the report says so.
  // The ranks agree on the smallest count (their set sizes and free memory may differ), so that
  // timed iteration i uses set number 1000 + i mod sets on every rank.
  absl::StatusOr<int> TimedSets(int64_t set_bytes) {
    const double want_l2 = std::ceil(o_.l2_multiple * dev_->l2_bytes() / set_bytes) + 1;
    const double budget = std::min(16.0 * (1 << 30), dev_->free_bytes() / 4);
    // One more set than the timed ones is drawn for the warm-up.
    const double fits = std::floor(budget / set_bytes) - 1;
    const double want = std::max<double>(want_l2, o_.iters);
    const int mine =
        static_cast<int>(std::max(2.0, std::min({want, double(o_.max_sets), fits})));
    at::Tensor sets = at::full({1}, static_cast<int64_t>(mine),
                               at::TensorOptions().dtype(at::kLong).device(cfg_.device));
    PKB_RETURN_IF_ERROR(comm_->AllReduce(sets, ReduceOp::kMin));
    return static_cast<int>(sets.item<int64_t>());
  }

  // Times `fn(set)` over warm-up and timed iterations. The warm-up calls `fn(sets)`, a set of its
  // own, so that the timed iterations (`fn(i % sets)`) meet contents they have not seen. Returns
  // per-iteration microseconds and the host wall clock over the timed window (device synchronized
  // before it closes). `before_timed()` runs after the warm-up; `after(i, set)` between timed
  // iterations, outside the events (its device work counts in the wall clock, not in the
  // per-iteration times).
  template <typename Fn, typename BeforeTimed, typename After>
  absl::Status Time(int sets, Fn fn, BeforeTimed before_timed, After after,
                    std::vector<double>* us, double* wall_us) {
    PKB_RETURN_IF_ERROR(dev_->Synchronize());
    PKB_RETURN_IF_ERROR(comm_->Barrier());
    for (int i = 0; i < o_.warmup; ++i) PKB_RETURN_IF_ERROR(fn(sets));
    before_timed();
    PKB_RETURN_IF_ERROR(dev_->Synchronize());
    PKB_RETURN_IF_ERROR(comm_->Barrier());
    dev_->ResetTimers(o_.iters);
    auto w0 = std::chrono::steady_clock::now();
    for (int i = 0; i < o_.iters; ++i) {
      dev_->Mark(i, 0);
      PKB_RETURN_IF_ERROR(fn(i % sets));
      dev_->Mark(i, 1);
      after(i, i % sets);
    }
    PKB_RETURN_IF_ERROR(dev_->Synchronize());
    *wall_us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - w0).count();
    us->clear();
    for (int i = 0; i < o_.iters; ++i) us->push_back(dev_->ElapsedUs(i));
    return absl::OkStatus();
  }

  // `n` distinct timed iterations, the same on every rank (their spot checks run the reference
  // together), drawn from a seed no candidate sees: each rank adds its own random bits.
  absl::StatusOr<std::vector<int>> PickIterations(int n) {
    at::Tensor seed = at::full({1}, static_cast<int64_t>(std::random_device{}() & 0xFFFFFFF),
                               at::TensorOptions().dtype(at::kLong).device(cfg_.device));
    PKB_RETURN_IF_ERROR(comm_->AllReduce(seed, ReduceOp::kSum));
    std::vector<int> all(o_.iters);
    for (int i = 0; i < o_.iters; ++i) all[i] = i;
    std::mt19937_64 rng(static_cast<uint64_t>(seed.item<int64_t>()));
    std::shuffle(all.begin(), all.end(), rng);
    all.resize(std::min<size_t>(n, all.size()));
    std::sort(all.begin(), all.end());
    return all;
  }

  absl::Status Benchmark(v1::RankReport* report) {
    auto t0 = std::chrono::steady_clock::now();
    const int64_t set_bytes = SetBytes();
    PKB_ASSIGN_OR_RETURN(const int sets, TimedSets(set_bytes));
    report->set_input_sets(sets);
    // Timed sets 1000 + s; the warm-up's own set (index `sets`) is 1000 + sets.
    std::vector<Inputs> inputs;
    std::vector<OutputSet> outputs;
    for (int s = 0; s <= sets; ++s) {
      const int set = static_cast<int>(1000 + s + o_.set_offset);
      inputs.push_back(DrawInputs(p_, cfg_, comm_->rank(), set));
      outputs.push_back(AllocateOutputs(p_, cfg_, comm_->rank(), set));
    }
    std::vector<double> us;
    double wall = 0;
    if (cand_.run) {
      for (auto& o : outputs) {
        for (auto& t : o.tensors) Poison(t, 1);
      }
      // Skipped work must leave poison, and any timed call may be the one re-checked:
      // - every set's outputs are poisoned after the warm-up, and again after each timed use but
      //   its last (right after the use, not before the next one, so the poisoned lines are out
      //   of L2 when the candidate writes them again: the sets together exceed L2 several times);
      // - the outputs of `checks` timed iterations, picked at random by the ranks together (the
      //   candidate cannot know which), are copied aside right after their call and compared
      //   with the reference after the window. A candidate that skips a fraction f of its calls
      //   passes with probability about (1 - f)^checks.
      int checks = std::min(o_.spot_checks, o_.iters);
      PKB_ASSIGN_OR_RETURN(std::vector<int> picks, PickIterations(checks));
      std::map<int, OutputSet> snapshots;
      auto poison_all = [&] {
        for (auto& o : outputs) {
          for (auto& t : o.tensors) Poison(t, 1);
        }
      };
      auto after_call = [&](int i, int s) {
        if (std::find(picks.begin(), picks.end(), i) != picks.end()) {
          OutputSet copy;
          for (auto& t : outputs[s].tensors) copy.tensors.push_back(t.clone());
          snapshots[i] = std::move(copy);
        }
        if (i + sets < o_.iters) {
          for (auto& t : outputs[s].tensors) Poison(t, i % 2);
        }
      };
      PKB_RETURN_IF_ERROR(Time(
          sets, [&](int s) { return CallCandidate(inputs[s], outputs[s]); }, poison_all,
          after_call, &us, &wall));
      for (double x : us) report->add_candidate_us(x);
      report->set_candidate_wall_us(wall);
      for (int i : picks) {
        int s = i % sets;
        PKB_ASSIGN_OR_RETURN(auto expected, p_.Reference(*comm_, inputs[s], cfg_));
        const int set = static_cast<int>(1000 + s + o_.set_offset);
        PKB_ASSIGN_OR_RETURN(
            auto checks, CompareOutputs(p_, cfg_, p_.OutputsOfSet(cfg_, comm_->rank(), set),
                                        snapshots[i].tensors, expected, 1));
        for (auto& c : checks) {
          c.set_name(absl::StrCat(c.name(), " (timed iteration ", i, ")"));
          if (!c.ok()) *report->add_spot_failures() = c;
        }
        for (auto& e : expected) Poison(e, 0);
      }
      report->set_spot_checks(checks);
    }
    if (o_.baseline) {
      PKB_RETURN_IF_ERROR(Time(
          sets,
          [&](int s) -> absl::Status {
            auto r = p_.Reference(*comm_, inputs[s], cfg_);
            return r.status();
          },
          [] {}, [](int, int) {}, &us, &wall));
      for (double x : us) report->add_baseline_us(x);
      report->set_baseline_wall_us(wall);
    }
    report->set_stage_benchmark_seconds(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return absl::OkStatus();
  }

 private:
  const RankOptions& o_;
  const Problem& p_;
  RunConfig cfg_;
  RankDevice* dev_;
  Comm* comm_;
  Candidate cand_;
  pkb_context* ctx_;
};

absl::Status Run(const RankOptions& o, v1::RankReport* report) {
  PKB_ASSIGN_OR_RETURN(const Problem* p, FindProblem(o.problem));
  RunConfig cfg;
  cfg.m = o.m;
  cfg.n = o.n;
  cfg.world = o.world;
  PKB_ASSIGN_OR_RETURN(cfg.dtype, DtypeFromName(o.dtype));
  PKB_RETURN_IF_ERROR(CheckRunnable(*p, cfg));

  RankIdentity id{o.rank, o.world, o.rendezvous};
  std::unique_ptr<RankDevice> dev;
  if (o.backend == "cpu") {
#ifdef PKB_WITH_MPI
    PKB_ASSIGN_OR_RETURN(dev, MakeCpuRankDevice(id));
#else
    return absl::FailedPreconditionError("this build of pkb-rank has no CPU (MPI) backend");
#endif
  } else {
#ifdef PKB_WITH_CUDA
    PKB_ASSIGN_OR_RETURN(dev, MakeCudaRankDevice(id));
#else
    return absl::FailedPreconditionError("this build of pkb-rank has no CUDA support");
#endif
  }
  cfg.device = dev->device();
  report->set_device_name(dev->name());
  auto stream_guard = dev->UseStream();
  auto groups = p->Groups(cfg);
  PKB_ASSIGN_OR_RETURN(Comm * comm, dev->MakeComm(groups));

  Harness h;
  h.device = dev.get();
  h.comm = comm;
  h.group_names.push_back("world");
  h.group_ranks.push_back(
      std::vector<int32_t>(comm->global_ranks().begin(), comm->global_ranks().end()));
  for (const auto& g : groups) {
    Comm* c = comm->Group(g.name);
    if (!c) continue;
    h.group_names.push_back(g.name);
    h.group_ranks.push_back(
        std::vector<int32_t>(c->global_ranks().begin(), c->global_ranks().end()));
  }
  for (size_t i = 0; i < h.group_names.size(); ++i) {
    Comm* c = i == 0 ? comm : comm->Group(h.group_names[i]);
    h.groups.push_back({h.group_names[i].c_str(), c->rank(), c->size(), h.group_ranks[i].data(),
                        dev->nccl_comm(h.group_names[i])});
  }
  pkb_context ctx{};
  ctx.api_version = PKB_API_VERSION;
  ctx.rank = o.rank;
  ctx.world_size = o.world;
  ctx.device_type = dev->device_type();
  ctx.device_index = dev->device_index();
  ctx.stream = dev->stream();
  ctx.nccl_comm = dev->nccl_comm("world");
  ctx.num_groups = static_cast<int32_t>(h.groups.size());
  ctx.groups = h.groups.data();
  ctx.symm_alloc = &CtxSymmAlloc;
  ctx.host_barrier = &CtxBarrier;
  ctx.set_error = &CtxSetError;
  ctx.log = &CtxLog;
  ctx.group = &CtxGroup;
  ctx.harness = &h;

  Candidate cand;
  if (!o.candidate.empty()) {
    auto loaded = LoadCandidate(o.candidate);
    if (!loaded.ok()) {
      report->set_status(v1::RUNTIME_ERROR);
      report->set_message(std::string(loaded.status().message()));
      return absl::OkStatus();
    }
    cand = *loaded;
    if (cand.init) {
      int rc = cand.init(&ctx);
      absl::Status synced = dev->Synchronize();
      if (rc != 0 || !synced.ok()) {
        report->set_status(v1::RUNTIME_ERROR);
        report->set_message(absl::StrCat("pkb_init failed on rank ", o.rank, ": ",
                                         rc != 0 ? h.error : std::string(synced.message())));
        return absl::OkStatus();
      }
    }
  }

  RankRunner runner(o, *p, cfg, dev.get(), comm, cand, &ctx);
  report->set_status(v1::OK);
  if (cand.run) {
    PKB_ASSIGN_OR_RETURN(bool ok, runner.Verify(report));
    if (!ok) {
      if (report->status() == v1::OK) {
        report->set_status(v1::MISMATCH);
        report->set_message("another rank's outputs differ from the reference");
      }
      return absl::OkStatus();
    }
  }
  Progress(o.rank, "{\"stage\": \"BENCHMARKING\"}");
  absl::Status bench = runner.Benchmark(report);
  if (!bench.ok()) {
    report->set_status(v1::RUNTIME_ERROR);
    report->set_message(absl::StrCat("rank ", o.rank, " while timing: ", bench.message()));
    return absl::OkStatus();
  }
  if (report->spot_failures_size() > 0) {
    report->set_status(v1::MISMATCH);
    report->set_message(
        absl::StrCat("rank ", o.rank, ": outputs of timed iterations differ from the reference"));
  }
  if (cand.fini) cand.fini(&ctx);
  return absl::OkStatus();
}

}  // namespace

// Known-good work with known answers on every device: after a job that crashed, faulted or hung,
// the worker runs this before it takes another job, and reports itself unhealthy if it fails.
absl::Status SelfTest() {
  std::vector<at::Device> devices;
#ifdef PKB_WITH_CUDA
  auto n = CudaDeviceCount();
  if (!n.ok()) return n.status();
  for (int d = 0; d < *n; ++d) devices.emplace_back(at::kCUDA, static_cast<c10::DeviceIndex>(d));
#endif
  if (devices.empty()) devices.emplace_back(at::kCPU);
  try {
    for (const auto& dev : devices) {
      auto opts = at::TensorOptions().device(dev);
      // sum of 2i+1 over i < 2^20 is (2^20)^2, exact in fp64.
      at::Tensor x = at::arange(1 << 20, opts.dtype(at::kDouble));
      double sum = (x * 2 + 1).sum().item<double>();
      // A bf16 GEMM of ones: every element is exactly K.
      at::Tensor a = at::ones({512, 256}, opts.dtype(at::kBFloat16));
      at::Tensor c = at::matmul(a, a.t());
      bool gemm_ok = c.eq(256).all().item<bool>();
      // A large allocation written and read back.
      at::Tensor big = at::full({64 << 20}, 7, opts.dtype(at::kInt));
      bool big_ok = big.sum().item<int64_t>() == int64_t(7) * (64 << 20);
      if (sum != double(1 << 20) * double(1 << 20) || !gemm_ok || !big_ok) {
        return absl::DataLossError(absl::StrCat("selftest on ", dev.str(),
                                                ": wrong results (sum ", sum, ", gemm ",
                                                gemm_ok, ", memory ", big_ok, ")"));
      }
    }
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("selftest failed: ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace pkb

int main(int argc, char** argv) {
  pkb::RankOptions o;
  CLI::App app{"One rank process of a PKB evaluation (started by pkb-eval)."};
  app.add_option("--problem", o.problem)->required();
  app.add_option("--m", o.m);
  app.add_option("--n", o.n);
  app.add_option("--dtype", o.dtype);
  app.add_option("--rank", o.rank, "this rank (CUDA backend; MPI gives it otherwise)");
  app.add_option("--world-size", o.world);
  app.add_option("--backend", o.backend)->check(CLI::IsMember({"cuda", "cpu"}));
  app.add_option("--candidate", o.candidate, "compiled candidate (.so); none: baseline only");
  app.add_option("--report", o.report)->required();
  app.add_option("--rendezvous", o.rendezvous);
  app.add_option("--trials", o.trials);
  app.add_option("--warmup", o.warmup);
  app.add_option("--iters", o.iters);
  app.add_option("--set-offset", o.set_offset);
  app.add_option("--max-sets", o.max_sets);
  app.add_option("--l2-multiple", o.l2_multiple);
  app.add_option("--spot-checks", o.spot_checks);
  app.add_flag("!--no-baseline", o.baseline);
  bool probe = false, selftest = false;
  app.add_flag("--probe", probe, "print the number of usable GPUs and exit");
  app.add_flag("--selftest", selftest,
               "run known-good work on every GPU (the CPU without one) and check its results");
  CLI11_PARSE(app, argc, argv);
  if (selftest) {
    absl::Status st = pkb::SelfTest();
    std::printf("%s\n", st.ok() ? "selftest ok" : std::string(st.message()).c_str());
    return st.ok() ? 0 : 1;
  }

  if (probe) {
#ifdef PKB_WITH_CUDA
    auto n = pkb::CudaDeviceCount();
    std::printf("%d\n", n.ok() ? *n : 0);
#else
    std::printf("0\n");
#endif
    return 0;
  }
  at::set_num_threads(1);
  pkb::v1::RankReport report;
  absl::Status s;
  try {
#ifdef PKB_WITH_MPI
    if (o.backend == "cpu") {
      o.rank = pkb::CpuBackendRank();
      o.world = pkb::CpuBackendWorld();
    }
#endif
    report.set_rank(o.rank);
    s = pkb::Run(o, &report);
  } catch (const std::exception& e) {
    s = absl::InternalError(absl::StrCat("exception: ", e.what()));
  }
  if (!s.ok()) {
    report.set_status(s.code() == absl::StatusCode::kInvalidArgument ||
                              s.code() == absl::StatusCode::kNotFound
                          ? pkb::v1::REJECTED
                          : pkb::v1::INTERNAL);
    report.set_message(std::string(s.message()));
  }
  std::string out;
  report.SerializeToString(&out);
  std::ofstream f(absl::StrCat(o.report, ".", o.rank), std::ios::binary);
  f << out;
  f.close();
  std::fflush(stdout);
#ifdef PKB_WITH_MPI
  if (o.backend == "cpu") pkb::FinalizeCpuBackend();
#endif
  // Leave without running the candidate's static destructors, which are not ours to trust.
  std::_Exit(f ? 0 : 3);
}
