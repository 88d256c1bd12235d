#include "worker/engine/judge.h"

#include <ATen/Parallel.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/eval_spec.h"
#include "common/files.h"
#include "common/quiet_word.h"
#include "pkb/v1/rank_host.pb.h"
#include "pkb/v1/result.pb.h"
#include "problems/harness/check.h"
#include "problems/harness/inputs.h"
#include "problems/harness/registry.h"
#include "problems/harness/ties.h"
#include "worker/engine/candidate_host.h"
#include "worker/engine/candidate_loader.h"
#include "worker/engine/judge_runner.h"
#include "worker/engine/rank_device.h"
#include "worker/engine/shared_arena.h"
#include "worker/engine/verdict.h"

namespace pkb {

void ReportProgress(int rank, const std::string& json) {
  if (rank != 0) return;
  std::printf("PKB-PROGRESS %s\n", json.c_str());
  std::fflush(stdout);
}

// Every rank agrees: true only if `ok` holds on all of them.
absl::StatusOr<bool> Judge::AllOk(bool ok) {
  at::Tensor t = at::full({1}, ok ? 0 : 1, at::TensorOptions().dtype(at::kInt).device(cfg_.device));
  PKB_RETURN_IF_ERROR(comm_->AllReduce(t, ReduceOp::kSum));
  return t.item<int>() == 0;
}

// The inputs the host was given, against a private copy: any change is the candidate's.
bool Judge::InputsUnchanged(const Inputs& shared, const Inputs& pristine, std::string* which) {
  for (size_t i = 0; i < shared.tensors.size(); ++i) {
    if (!at::equal(shared[i], pristine[i])) {
      *which = shared.names[i];
      return false;
    }
  }
  return true;
}

absl::StatusOr<bool> Judge::Verify(v1::RankReport* report) {
  auto t0 = std::chrono::steady_clock::now();
  bool all_ok = true;
  for (int trial = 0; trial < o_.spec.trials(); ++trial) {
    int set = static_cast<int>(trial + o_.spec.set_offset());
    // `pristine` never leaves this process; the host sees copies in a shared arena.
    const auto t_trial = std::chrono::steady_clock::now();
    Inputs pristine = DrawInputs(p_, cfg_, comm_->rank(), set);
    const auto decls = p_.OutputsOfSet(cfg_, comm_->rank(), set);
    SharedArena arena(dev_, host_);
    PKB_RETURN_IF_ERROR(arena.Reserve(SharedArena::BytesFor(pristine, decls)));
    PKB_ASSIGN_OR_RETURN(auto placed, arena.PlaceSet(pristine, decls, cfg_.device));
    auto& [in, out] = placed;
    for (auto& t : out.tensors) Poison(t, trial % 2);
    PKB_ASSIGN_OR_RETURN(v1::HostCall call, arena.Describe(in, out));
    PKB_RETURN_IF_ERROR(dev_->Synchronize());
    PKB_RETURN_IF_ERROR(comm_->Barrier());
    v1::RankTrial* rt = report->add_trials();
    rt->set_rank(comm_->rank());
    rt->set_trial(trial);
    const auto t_called = std::chrono::steady_clock::now();
    absl::Status run = host_->Call(call);
    const auto t_answered = std::chrono::steady_clock::now();
    if (!run.ok()) {
      rt->set_error(std::string(run.message()));
      report->set_status(v1::RUNTIME_ERROR);
      report->set_message(
          absl::StrCat("rank ", comm_->rank(), " trial ", trial, ": ", run.message()));
      return false;
    }
    // Only now does the reference run, here, on the private copy of the inputs.
    PKB_ASSIGN_OR_RETURN(auto expected, p_.Reference(*comm_, pristine, cfg_));
    PKB_ASSIGN_OR_RETURN(auto tie_keys, TieKeysOf(p_, *comm_, pristine, cfg_, expected));
    PKB_RETURN_IF_ERROR(dev_->Synchronize());
    bool ok = true;
    std::string changed;
    if (!InputsUnchanged(in, pristine, &changed)) {
      ok = false;
      rt->set_error(absl::StrCat("the candidate modified its input '", changed, "'"));
    }
    PKB_ASSIGN_OR_RETURN(
        auto checks, CompareOutputs(p_, cfg_, decls, out.tensors, expected, trial % 2, tie_keys));
    for (auto& c : checks) {
      ok = ok && c.ok();
      *rt->add_outputs() = std::move(c);
    }
    rt->set_ok(ok);
    PKB_ASSIGN_OR_RETURN(bool everyone, AllOk(ok));
    auto ms = [](auto a, auto b) {
      return std::chrono::duration<double, std::milli>(b - a).count();
    };
    std::fprintf(stderr,
                 "pkb-rank %d: trial %d: set placed in %.1f ms, the host's call %.1f ms, the "
                 "reference and checks %.1f ms\n",
                 comm_->rank(), trial, ms(t_trial, t_called), ms(t_called, t_answered),
                 ms(t_answered, std::chrono::steady_clock::now()));
    ReportProgress(comm_->rank(), absl::StrFormat("{\"trial\": %d, \"ok\": %s}", trial,
                                                  everyone ? "true" : "false"));
    if (!everyone) {
      all_ok = false;
      if (!ok) {
        report->set_status(v1::MISMATCH);
        report->set_message(
            absl::StrCat("rank ", comm_->rank(), " trial ", trial, ": ",
                         rt->error().empty() ? "output differs from the reference" : rt->error()));
      }
      break;
    }
  }
  report->set_stage_verify_seconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return all_ok;
}

absl::Status AwaitCandidate(const RankOptions& o) {
  if (o.candidate_gate.empty()) return absl::OkStatus();
  PKB_RETURN_IF_ERROR(AwaitFile(o.candidate_gate, o.gate_limit_s, "the compiled candidate"));
  // pkb-eval writes the file whole (a rename), so once it exists it says all it will.
  std::ifstream gate(o.candidate_gate);
  std::string word;
  gate >> word;
  if (word == "go") return absl::OkStatus();
  return absl::CancelledError(
      absl::StrCat("the run was called off before the candidate was loaded (", word, ")"));
}

namespace {

// The hosts' own rendezvous folder (NCCL ids, symmetric memory), beside the judges'.
std::string HostRendezvous(const RankOptions& o) {
  const std::string dir = (o.rendezvous.empty() ? "." : o.rendezvous) + "/host";
  mkdir(dir.c_str(), 0700);
  return dir;
}

absl::StatusOr<std::unique_ptr<RankDevice>> MakeRankDevice(const RankOptions& o,
                                                           const RankIdentity& id) {
  if (o.backend == "cpu") {
#ifdef PKB_WITH_MPI
    return MakeCpuRankDevice(id);
#else
    return absl::FailedPreconditionError("this build of pkb-rank has no CPU (MPI) backend");
#endif
  }
#ifdef PKB_WITH_CUDA
  return MakeCudaRankDevice(id);
#else
  return absl::FailedPreconditionError("this build of pkb-rank has no CUDA support");
#endif
}

RankIdentity IdentityOf(const RankOptions& o, int world) {
  RankIdentity id{o.rank, world, o.rendezvous};
  id.share_gpu = o.backend == "cuda-shared";
  return id;
}

}  // namespace

absl::Status WarmJudgeKernels(RankDevice* dev) {
  auto stream_guard = dev->UseStream();
  const auto opts = at::TensorOptions().device(dev->device());
  try {
    for (at::ScalarType dtype : {at::kBFloat16, at::kHalf, at::kFloat, at::kLong, at::kInt}) {
      const at::Tensor expected = at::arange(1, 4097, opts.dtype(at::kFloat)).to(dtype);
      at::Tensor right = expected.clone();
      at::Tensor poisoned = at::empty_like(expected);
      Tolerance tol;
      tol.exact = !at::isFloatingType(dtype);
      for (int variant : {0, 1}) {
        Poison(poisoned, variant);
        (void)CountPoisoned(poisoned, variant);
        (void)CompareOutput(poisoned, expected, tol, variant);  // every element bad
        (void)CompareOutput(right, expected, tol, variant);
      }
      (void)at::equal(right, expected);
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("warming the judge's kernels: ", e.what()));
  }
  // The byte moves' kernel (the landing), staged and run once on 16 bytes.
  at::Tensor bytes = at::zeros({32}, opts.dtype(at::kByte));
  PKB_ASSIGN_OR_RETURN(
      auto moves,
      dev->StageMoves({{bytes.data_ptr(), static_cast<uint8_t*>(bytes.data_ptr()) + 16, 16}}));
  PKB_RETURN_IF_ERROR(moves->Run());
  return dev->Synchronize();
}

absl::StatusOr<std::unique_ptr<RankDevice>> SetUpDeviceEarly(const RankOptions& o, int world,
                                                             CandidateHost* host) {
  if (world < 1) return absl::InvalidArgumentError("a device set up early needs the world size");
  const bool with_host = !o.candidate.empty();  // spawned already (pkb-rank --await-spec)
  if (with_host) {
    v1::HostInit device;
    device.set_backend(o.backend);
    device.set_rank(o.rank);
    device.set_world(world);
    device.set_rendezvous(HostRendezvous(o));
    PKB_RETURN_IF_ERROR(host->SetUpDevice(device));
  }
  PKB_ASSIGN_OR_RETURN(std::unique_ptr<RankDevice> dev, MakeRankDevice(o, IdentityOf(o, world)));
  PKB_RETURN_IF_ERROR(dev->PrepareWorld());
  const auto t_warm = std::chrono::steady_clock::now();
  PKB_RETURN_IF_ERROR(WarmJudgeKernels(dev.get()));
  std::fprintf(
      stderr, "pkb-rank %d: the checks' kernels loaded in %.1f ms, before the job\n", o.rank,
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_warm).count());
  if (absl::Status ready = with_host ? host->Ready() : absl::OkStatus(); !ready.ok()) {
    return absl::InternalError(
        absl::StrCat("the candidate's process failed to set up its device: ", ready.message()));
  }
  return dev;
}

absl::Status RunJudge(const RankOptions& o, CandidateHost* host_process,
                      std::unique_ptr<RankDevice> early, v1::RankReport* report,
                      std::vector<std::shared_ptr<void>>* keep) {
  CandidateHost& host = *host_process;
  // Declared before the guard below, so released after it.
  std::unique_ptr<RankDevice> dev = std::move(early);
  // Whatever the way out, the host and everything it started are gone before the devices are.
  struct KillAtExit {
    CandidateHost* host;
    ~KillAtExit() { (void)host->Kill(); }
  } kill_host{host_process};
  PKB_ASSIGN_OR_RETURN(const Problem* p, FindProblem(o.spec.problem_id()));
  RunConfig cfg;
  cfg.m = o.spec.m();
  cfg.n = o.spec.n();
  cfg.world = o.spec.world_size();
  PKB_ASSIGN_OR_RETURN(cfg.dtype, DtypeFromName(o.spec.dtype()));
  PKB_RETURN_IF_ERROR(CheckRunnable(*p, cfg));

  auto groups = p->Groups(cfg);
  // The candidate's process first (spawned already by a rank started ahead of its job), so that
  // its device and communicators are set up while ours are.
  if (!o.candidate.empty()) {
    v1::HostInit init;
    init.set_candidate(o.candidate);
    init.set_backend(o.backend);
    init.set_rank(o.rank);
    init.set_world(o.spec.world_size());
    init.set_rendezvous(HostRendezvous(o));
    for (const auto& g : groups) {
      auto* hg = init.add_groups();
      hg->set_name(g.name);
      for (const auto& part : g.partition) {
        auto* hp = hg->add_partition();
        for (int r : part) hp->add_ranks(r);
      }
    }
    // Nothing of the submission runs before Load: a host that fails until then is the harness's
    // failure (INTERNAL), a standby's host that died waiting included.
    absl::Status started = host.Start(init);
    if (!started.ok()) {
      return absl::InternalError(
          absl::StrCat("the candidate's process did not start: ", started.message()));
    }
  }

  using Clock = std::chrono::steady_clock;
  auto seconds_since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  auto t_device = Clock::now();
  const bool set_up_early = dev != nullptr;
  if (!set_up_early) {
    PKB_ASSIGN_OR_RETURN(dev, MakeRankDevice(o, IdentityOf(o, o.spec.world_size())));
  }
  cfg.device = dev->device();
  report->set_device_name(dev->name());
  auto stream_guard = dev->UseStream();
  report->set_stage_device_seconds(seconds_since(t_device));
  // A collective of every judge: past it, every rank has read (and deleted) its report key, and
  // the submission may be loaded. A world made before the job was known is no such collective:
  // a barrier over it is.
  auto t_comms = Clock::now();
  PKB_ASSIGN_OR_RETURN(Comm * comm, dev->MakeComm(groups));
  if (set_up_early) PKB_RETURN_IF_ERROR(comm->Barrier());
  report->set_stage_comms_seconds(seconds_since(t_comms));
  host.Bind(comm);
  if (host.running()) {
    // Everything above ran while the source compiled; nothing of the submission had until here.
    auto t_ready = Clock::now();
    if (absl::Status ready = host.Ready(); !ready.ok()) {
      return absl::InternalError(
          absl::StrCat("the candidate's process failed to set up: ", ready.message()));
    }
    report->set_stage_host_ready_seconds(seconds_since(t_ready));
    PKB_RETURN_IF_ERROR(AwaitCandidate(o));
    auto t_load = Clock::now();
    absl::Status loaded = host.Load();
    report->set_stage_host_load_seconds(seconds_since(t_load));
    if (!loaded.ok()) {
      report->set_status(v1::RUNTIME_ERROR);
      report->set_message(std::string(loaded.message()));
      return absl::OkStatus();
    }
  }

  const auto since_spec = [report] {
    return absl::ToDoubleMilliseconds(absl::Now() -
                                      absl::FromUnixMicros(report->spec_seen_unix_micros()));
  };
  std::fprintf(stderr, "pkb-rank %d: set up for the job %.1f ms after its spec\n", o.rank,
               since_spec());
  auto runner_owned = std::make_shared<Judge>(o, *p, cfg, dev.get(), comm, &host);
  Judge& runner = *runner_owned;
  if (keep) {
    // Never released (pkb-rank leaves with std::_Exit); were they, the Judge must go before the
    // device its memory lies on.
    keep->push_back(runner_owned);
    keep->push_back(stream_guard);
    keep->push_back(std::shared_ptr<RankDevice>(std::move(dev)));
  }
  report->set_status(v1::OK);
  if (host.running()) {
    PKB_ASSIGN_OR_RETURN(bool ok, runner.Verify(report));
    if (!ok) {
      if (report->status() == v1::OK) {
        report->set_status(v1::MISMATCH);
        report->set_message("another rank's outputs differ from the reference");
      }
      return absl::OkStatus();
    }
  }
  ReportProgress(o.rank, "{\"stage\": \"BENCHMARKING\"}");
  if (o.await_quiet) {
    const auto t0 = std::chrono::steady_clock::now();
    if (o.rank == 0) {
      const bool heard = AwaitGoWord(0, o.go_word, absl::Seconds(kQuietLimitSeconds));
      if (!heard) {
        std::fprintf(stderr,
                     "pkb-rank 0: no word from the engine (within %.0f s, or before its "
                     "end); timing anyway\n",
                     kQuietLimitSeconds);
      }
      report->set_quiet_word_heard(heard);
    }
    // The others wait for rank 0, and none times before all are here.
    PKB_ASSIGN_OR_RETURN(bool ok, runner.AllOk(true));
    (void)ok;
    report->set_bench_quiet_seconds(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  absl::Status bench = runner.Benchmark(report);
  if (!bench.ok()) {
    report->set_status(v1::RUNTIME_ERROR);
    report->set_message(absl::StrCat("rank ", o.rank, " while timing: ", bench.message()));
    return absl::OkStatus();
  }
  std::fprintf(stderr, "pkb-rank %d: judged %.1f ms after its spec\n", o.rank, since_spec());
  if (report->spot_failures_size() > 0 && report->status() == v1::OK) {
    const v1::OutputCheck& first = report->spot_failures(0);
    report->set_status(v1::MISMATCH);
    report->set_message(absl::StrCat(
        "rank ", o.rank,
        ": outputs of timed iterations differ from the reference; first: ", first.name(), ": ",
        first.problem().empty()
            ? absl::StrCat(first.bad_count(), " of ", first.numel(), " elements bad (",
                           first.unwritten_count(), " unwritten)")
            : first.problem()));
  }
  return absl::OkStatus();
}

}  // namespace pkb
