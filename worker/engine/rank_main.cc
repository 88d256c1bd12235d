// pkb-rank: one rank process of an evaluation, the judge of its rank (judge.h). The engine starts
// W of them (directly on GPU nodes, under mpirun on CPU machines and where ranks share GPUs).
// The same binary is the candidate host (`pkb-rank --candidate-host`, host_process.cc), and
// answers two questions on its own: `pkb-rank probe` (the usable GPUs) and `pkb-rank selftest`
// (known-good work on every device, the worker's health check after a failed job).
//
// This file holds the process around the judge: its flags (the job's spec comes as a file), its
// cores, the report key the engine gave it (read and deleted before anything of the submission
// runs), and the signed report.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/eval_spec.h"
#include "common/files.h"
#include "common/quiet_word.h"
#include "pkb/v1/result.pb.h"
#include "worker/engine/candidate_host.h"
#include "worker/engine/core_pinning.h"
#include "worker/engine/judge.h"
#include "worker/engine/rank_device.h"
#include "worker/engine/verdict.h"

namespace pkb {

int CandidateHostMain(int channel_fd);  // host_process.cc

namespace {

// Keeps this rank's judge, and the host it starts (which inherits it), on physical cores of its
// own (core_pinning.h): a host-bound call's time should not depend on which cores the scheduler
// picked, nor on another rank's processes. The CPUs chosen go to the rank log.
void PinRank(int rank, int world) {
  std::vector<int> mine =
      RankCores(ReadCpuTopology(AllowedCpus(), "/sys/devices/system/cpu"), rank, world);
  if (mine.empty()) return;
  if (absl::Status s = PinTo(mine); !s.ok()) {
    std::fprintf(stderr, "pkb-rank %d: %s\n", rank, std::string(s.message()).c_str());
    return;
  }
  std::fprintf(stderr, "pkb-rank %d: pinned to CPUs %s (one hardware thread per core)\n", rank,
               absl::StrJoin(mine, ",").c_str());
}

// The engine's key for this rank's report (verdict.h), read and deleted before anything of the
// submission runs. Empty when there is none (a run by hand): the report goes unsigned.
std::string TakeReportKey(const std::string& report, int rank) {
  const std::string path = absl::StrCat(report, ".key.", rank);
  std::ifstream f(path, std::ios::binary);
  if (!f) return {};
  std::string key((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::remove(path.c_str());
  return key;
}

// The verdict of a judging that ended in an error: ABORTED is the candidate's process failing or
// dying (CandidateHost); INVALID_ARGUMENT and NOT_FOUND are what the job asked for; the rest is
// the harness's own.
v1::Status VerdictOfError(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kAborted:
      return v1::RUNTIME_ERROR;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
      return v1::REJECTED;
    default:
      return v1::INTERNAL;
  }
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
        return absl::DataLossError(absl::StrCat("selftest on ", dev.str(), ": wrong results (sum ",
                                                sum, ", gemm ", gemm_ok, ", memory ", big_ok, ")"));
      }
    }
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("selftest failed: ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace pkb

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "--candidate-host") return pkb::CandidateHostMain(3);
  // The judge: no process of the same uid (the candidate host above all) may attach to it or
  // read its memory, where the reference's outputs and the report key live.
  prctl(PR_SET_DUMPABLE, 0);
  // Every process the candidate host starts comes back to the judge when its parent dies, so that
  // none outlives the host (CandidateHost::Kill).
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  pkb::RankOptions o;
  CLI::App app{"One rank process of a PKB evaluation (started by pkb-eval)."};
  // A rank's judging (no subcommand) needs --spec and --report; probe and selftest need nothing.
  std::string spec_path;
  int world = -1;
  app.add_option("--spec", spec_path, "the job's pkb.v1.EvalSpec, as pkb-eval wrote it");
  app.add_option("--rank", o.rank, "this rank (CUDA backend; MPI gives it otherwise)");
  app.add_option("--world-size", world, "the ranks started (CUDA backend; MPI says it otherwise)");
  // cuda-shared: started by mpirun, ranks share GPUs, judges' collectives over staged MPI.
  app.add_option("--backend", o.backend)->check(CLI::IsMember({"cuda", "cpu", "cuda-shared"}));
  app.add_option("--candidate", o.candidate, "compiled candidate (.so); none: baseline only");
  app.add_option("--report", o.report);
  app.add_option("--rendezvous", o.rendezvous);
  app.add_flag("!--no-baseline", o.baseline);
  app.add_option("--candidate-gate", o.candidate_gate,
                 "load the candidate once this file says go (it compiles while the rank starts)");
  app.add_option("--gate-limit", o.gate_limit_s, "the longest wait for the gate, seconds");
  app.add_flag("--await-quiet", o.await_quiet,
               "before timing, wait for the engine's word on stdin (rank 0; the others wait "
               "for rank 0)");
  bool await_spec = false;
  double await_limit_s = 3600;
  app.add_flag("--await-spec", await_spec,
               "started ahead of its job: start the candidate host, then wait for --spec to "
               "appear");
  app.add_option("--await-limit", await_limit_s, "the longest wait for the spec, seconds");
  bool device_early = false;
  app.add_flag("--device-early", device_early,
               "with --await-spec: set up the device and world communicator (the host's too) "
               "while waiting; only where the engine holds the node's GPU lock");
  CLI::App* probe = app.add_subcommand("probe", "print the number of usable GPUs and exit");
  CLI::App* selftest = app.add_subcommand(
      "selftest", "run known-good work on every GPU (the CPU without one) and check its results");
  app.require_subcommand(0, 1);
  CLI11_PARSE(app, argc, argv);
  if (selftest->parsed()) {
    absl::Status st = pkb::SelfTest();
    std::printf("%s\n", st.ok() ? "selftest ok" : std::string(st.message()).c_str());
    return st.ok() ? 0 : 1;
  }

  if (probe->parsed()) {
#ifdef PKB_WITH_CUDA
    auto n = pkb::CudaDeviceCount();
    std::printf("%d\n", n.ok() ? *n : 0);
#else
    std::printf("0\n");
#endif
    return 0;
  }
  if (spec_path.empty() || o.report.empty()) {
    std::fprintf(stderr, "pkb-rank: a rank's judging needs --spec and --report\n");
    return 2;
  }
  at::set_num_threads(1);
  if (o.backend == "cuda") pkb::PinRank(o.rank, world);
  const bool under_mpirun = o.backend == "cpu" || o.backend == "cuda-shared";
  pkb::v1::RankReport report;
  absl::Status s;
  std::string key;
  pkb::CandidateHost host;
  std::unique_ptr<pkb::RankDevice> early;
  // The judge's device, communicators and memory after its judging: never released here. The
  // report goes out first, and the process's exit frees them (RunJudge).
  std::vector<std::shared_ptr<void>> kept;
  // MPI gives the rank and W under mpirun. A standby of GPU ranks sets it up once the job is
  // there: an MPI built with CUDA support may make a context on the GPU as it starts.
  auto start_mpi = [&] {
#ifdef PKB_WITH_MPI
    o.rank = pkb::CpuBackendRank();
    world = pkb::CpuBackendWorld();
    report.set_rank(o.rank);
#else
    throw std::runtime_error("backend " + o.backend + " needs MPI; this pkb-rank has none");
#endif
  };
  // With the node's GPU lock held for them (--device-early), standby ranks sharing a GPU start
  // MPI at once too, then set up their devices.
  const bool mpi_first = under_mpirun && !(await_spec && o.backend != "cpu" && !device_early);
  try {
    report.set_rank(o.rank);
    if (mpi_first) start_mpi();
    if (await_spec) {
      // Started ahead of its job: the host's process start and library loads run now, while no
      // job is known. The GPU is touched before the spec is there only with --device-early,
      // which the engine passes when it holds the node's GPU lock already (StartStandby).
      if (!o.candidate.empty()) s = host.Spawn();
      if (s.ok() && device_early) {
        const absl::Time t0 = absl::Now();
        absl::StatusOr<std::unique_ptr<pkb::RankDevice>> set_up =
            pkb::SetUpDeviceEarly(o, world, &host);
        if (set_up.ok()) {
          early = *std::move(set_up);
          report.set_stage_early_seconds(absl::ToDoubleSeconds(absl::Now() - t0));
          // Set up: the engine may give the node's GPU lock back until the job (StandbyRanks).
          std::ofstream(absl::StrCat(o.rendezvous.empty() ? "." : o.rendezvous, "/early.", o.rank));
        } else {
          s = set_up.status();
        }
      }
      if (s.ok()) s = pkb::AwaitFile(spec_path, await_limit_s, "the job's spec");
    }
    if (s.ok() && under_mpirun && !mpi_first) start_mpi();
    absl::StatusOr<pkb::v1::EvalSpec> spec = pkb::ReadSpecFile(spec_path);
    if (s.ok() && !spec.ok()) s = spec.status();
    if (s.ok()) {
      o.spec = *spec;
      report.set_spec_seen_unix_micros(absl::ToUnixMicros(absl::Now()));
      pkb::ApplyDefaults(&o.spec);  // a spec written by hand may leave the defaults out
      if (world > 0) o.spec.set_world_size(world);
      // A functional run times no reference (engine.h).
      if (o.spec.functional()) o.baseline = false;
      key = pkb::TakeReportKey(o.report, o.rank);
      if (!key.empty()) o.go_word = pkb::GoWord(key);
      s = pkb::RunJudge(o, &host, std::move(early), &report, &kept);
    }
  } catch (const std::exception& e) {
    s = absl::InternalError(absl::StrCat("exception: ", e.what()));
  }
  if (!s.ok()) {
    report.set_status(pkb::VerdictOfError(s.code()));
    report.set_message(std::string(s.message()));
  }
  std::string out;
  report.set_report_unix_micros(absl::ToUnixMicros(absl::Now()));
  report.SerializeToString(&out);
  if (!key.empty()) out = pkb::SignReport(key, out);
  const absl::Status written = pkb::WriteReportFile(absl::StrCat(o.report, ".", o.rank), out);
  if (written.ok()) {
    std::fprintf(stderr, "pkb-rank %d: report written %.1f ms after the spec\n", o.rank,
                 report.spec_seen_unix_micros() > 0
                     ? (report.report_unix_micros() - report.spec_seen_unix_micros()) / 1e3
                     : 0.0);
  } else {
    std::fprintf(stderr, "pkb-rank %d: %s\n", o.rank, std::string(written.message()).c_str());
  }
  std::fflush(stdout);
  // The candidate failed here: the other ranks may be waiting for this one in a collective, so
  // leave without the orderly shutdown; the launcher (mpirun, pkb-rank-group) then ends them.
  if (report.status() == pkb::v1::RUNTIME_ERROR) std::_Exit(4);
  // No key taken (a standby that gave up waiting, a spec it could not read): its report is not
  // signed, and the rank fails rather than look like one whose report was forged.
  if (key.empty() && !s.ok()) std::_Exit(5);
  // Peers of NCCL collectives (ranks of their own GPUs) may still be in their last one with this
  // rank's memory: the context stays until they are done. Only after a judging that reached its
  // end: one that stopped on an error may have left its peers in a collective for good. (Under
  // mpirun the judges' collectives are MPI's, host-staged, and MPI_Finalize comes next.)
  if (s.ok() && !kept.empty() && o.backend == "cuda" && o.spec.world_size() > 1 &&
      !pkb::AwaitPeerReports(o.report, o.rank, o.spec.world_size(), absl::Seconds(30))) {
    std::fprintf(stderr, "pkb-rank %d: the other ranks' reports did not come within 30 s\n",
                 o.rank);
  }
#ifdef PKB_WITH_MPI
  if (under_mpirun) pkb::FinalizeCpuBackend();
#endif
  std::_Exit(written.ok() ? 0 : 3);
}
