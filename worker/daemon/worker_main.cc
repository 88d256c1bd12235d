// pkb-worker: the worker daemon of one GPU node (see docs/service.md).
#include <unistd.h>

#include <csignal>
#include <filesystem>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/config.h"
#include "common/files.h"
#include "common/harness_version.h"
#include "common/logging.h"
#include "common/metrics_server.h"
#include "common/subprocess.h"
#include "common/systemd.h"
#include "spdlog/spdlog.h"
#include "worker/daemon/scratch_root.h"
#include "worker/daemon/worker_daemon.h"
#include "worker/daemon/worker_metrics.h"
#include "worker/engine/core_pinning.h"
#include "worker/engine/gpu_select.h"

namespace {

pkb::WorkerDaemon* g_daemon = nullptr;
void OnSignal(int) {
  if (g_daemon) g_daemon->RequestDrain();
}

// What nvidia-smi says about this node's GPUs, or about the share `only` of them (nvidia-smi -i:
// indices or UUIDs), whose UUIDs go into `uuids`; nothing on a GPU-less node. An error only when
// a share was asked for and nvidia-smi could not list it.
absl::Status DetectGpus(const std::string& only, pkb::v1::WorkerCapabilities* caps,
                        std::vector<std::string>* uuids) {
  pkb::SubprocessOptions opts;
  opts.argv = {"nvidia-smi", "--query-gpu=name,driver_version,uuid", "--format=csv,noheader"};
  if (!only.empty()) opts.argv.push_back("--id=" + only);
  opts.timeout = absl::Seconds(20);
  auto r = pkb::RunSubprocess(opts);
  if (!r.ok() || r->exit_code != 0 || r->signaled) {
    if (only.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "--gpus ", only, ": nvidia-smi could not list them (",
        r.ok() ? absl::StrCat(r->Describe(), ": ", r->out.substr(0, 300), r->err.substr(0, 300))
               : std::string(r.status().message()),
        ")"));
  }
  for (absl::string_view line : absl::StrSplit(r->out, '\n', absl::SkipWhitespace())) {
    std::vector<std::string> f = absl::StrSplit(line, ", ");
    if (f.size() < 3) continue;
    caps->set_gpu_count(caps->gpu_count() + 1);
    caps->set_gpu_model(f[0]);
    caps->set_driver_version(f[1]);
    uuids->push_back(std::string(absl::StripAsciiWhitespace(f[2])));
  }
  std::string model = absl::AsciiStrToLower(caps->gpu_model());
  for (const char* cls : {"h200", "h100", "b200", "gb200", "a100", "l40s"}) {
    if (model.find(cls) != std::string::npos) {
      caps->set_gpu_class(cls);
      break;
    }
  }
  if (caps->gpu_class().empty() && caps->gpu_count() > 0) caps->set_gpu_class("other");
  caps->set_interconnect(caps->gpu_count() > 1 ? "nvlink" : "none");
  if (only.empty()) return absl::OkStatus();
  // The share goes to every engine (pkb-eval --gpus) and into the health check's command line:
  // GPUs named once each, each a UUID.
  if (uuids->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--gpus ", only, ": nvidia-smi listed no GPU: ", r->out.substr(0, 300)));
  }
  // The engine's own check of --gpus (each a UUID, none twice), here at start rather than in
  // every job.
  if (absl::StatusOr<std::vector<std::string>> checked =
          pkb::ParseGpuUuids(absl::StrJoin(*uuids, ","));
      !checked.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--gpus ", only, ": nvidia-smi listed ",
                                                   r->out.substr(0, 300), "; ",
                                                   checked.status().message()));
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  pkb::WorkerDaemonOptions o;
  pkb::EngineExecutorOptions e;
  std::string gpu_class;
  int max_world_size = 0;
  int max_functional_world_size = 8;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  o.worker_id = absl::StrCat(host, "-", getpid());
  o.capabilities.set_harness_version(pkb::HarnessVersion());
  e.scratch = std::filesystem::temp_directory_path().string();
  std::error_code ec;
  auto self = std::filesystem::canonical("/proc/self/exe", ec);
  for (auto candidate : {self.parent_path() / "pkb-eval",
                         self.parent_path().parent_path() / "engine" / "pkb-eval"}) {
    if (std::filesystem::exists(candidate, ec)) {
      e.engine = candidate.string();
      break;
    }
  }

  CLI::App app{
      "PKB worker daemon: takes evaluations from the coordinator and runs them with pkb-eval"};
  pkb::PrepareConfig(app);
  app.add_option("--coordinator", o.coordinator, "host:port of the coordinator")
      ->capture_default_str();
  app.add_option("--worker-id", o.worker_id, "stable name of this worker")->capture_default_str();
  app.add_option("--engine", e.engine, "the pkb-eval binary")->capture_default_str();
  app.add_option("--scratch", e.scratch,
                 "folder for this worker's folder of per-job scratch folders (pkb-worker-*; "
                 "those of dead workers are removed at start)")
      ->capture_default_str();
  app.add_option("--gpu-class", gpu_class,
                 "override the detected gpu class (h200, h100, cpu, ...)");
  std::string gpus;
  app.add_option("--gpus", gpus,
                 "serve this share of the node's GPUs only (nvidia-smi's indices or UUIDs, "
                 "comma-separated): run one worker per share to keep every GPU of a node busy "
                 "with jobs of their own (docs/operations.md); default: the whole node");
  app.add_option("--max-world-size", max_world_size,
                 "largest W accepted (default: the GPU count; 8 on a GPU-less node, whose engine "
                 "answers NO_DEVICE)");
  app.add_option("--max-functional-world-size", max_functional_world_size,
                 "largest W of a functional job, whose ranks share this node's GPUs (0 to 8; 0: "
                 "none beyond --max-world-size)")
      ->check(CLI::Range(0, 8))
      ->capture_default_str();
  int compile_slots = -1;  // -1: pkb::DefaultCompileSlots, once the CPUs are known
  app.add_option(
         "--compile-slots", compile_slots,
         "compile tasks (Evaluation.Check with compile, and the coordinator's compiles "
         "ahead of queued jobs: this less one, or 1) run at once beside the jobs, each a "
         "sandboxed pkb-eval --compile-only; 0: take none; default: one per CPU the "
         "compiles may run on (off the ranks' cores on a GPU node), no more than one per "
         "2 GiB of memory, scaled to this worker's share of the node's GPUs where it serves one "
         "(--gpus) and may run on every online CPU; at least 2, at most 8 (the start "
         "log says which)")
      ->check(CLI::Range(0, 16));
  e.standby = true;
  app.add_flag("!--no-standby-engine", e.standby,
               "do not start the engine for the next job ahead of it (pkb-eval --standby: "
               "its rank processes for the last job's W and backend, ready when the job comes)");
  e.settle_baseline = 10;  // the engine's kSettledBaseline (worker/engine/engine.h)
  app.add_option("--settle-baseline", e.settle_baseline,
                 "GPU jobs: while this node has fewer measurements of a job's reference, the job "
                 "times it again in fresh processes before its speedup is computed (about 1 s "
                 "each, once per shape and node); 0: off")
      ->check(CLI::Range(0, 25))
      ->capture_default_str();
  app.add_option("--baseline-max-age-hours", e.baseline_max_age_hours,
                 "GPU jobs: the node's baseline leaves out measurements older than this, and a "
                 "job whose reference has too few left settles it again (pkb-eval's flag); 0: "
                 "the engine's default, 24")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            double h = -1;
            if (!absl::SimpleAtod(s, &h) || !(h == 0 || (h >= 0.01 && h <= 8760))) {
              return "0, or from 0.01 to 8760 (pkb-eval's range)";
            }
            return "";
          },
          "0 or 0.01-8760"))
      ->capture_default_str();
  app.add_option("--harness-version", *o.capabilities.mutable_harness_version(),
                 "the engine's harness version")
      ->capture_default_str();
  std::string token_file, tls_ca, health_command;
  app.add_option("--health-check", health_command,
                 "shell command run after every job; failing marks the node unhealthy "
                 "(default on a GPU node: nvidia-smi must still list every GPU)");
  app.add_option("--tls-ca", tls_ca, "PEM root certificates: connect with TLS");
  app.add_option("--token-file", token_file,
                 "file holding this worker's bearer token (role worker)");
  std::string metrics_listen;
  app.add_option("--metrics-listen", metrics_listen,
                 "host:port of Prometheus /metrics and /healthz (empty: off)");
  std::string log_format = "text";
  app.add_option("--log-format", log_format, "text, or json: one object per line")
      ->capture_default_str();
  int exit_code = 0;
  if (!pkb::ParseConfig(app, argc, argv, "PKB_WORKER", &exit_code)) return exit_code;
  if (absl::Status st = pkb::ConfigureLogging(log_format, "pkb-worker", o.worker_id); !st.ok()) {
    spdlog::error("{}", std::string(st.message()));
    return 2;
  }
  if (!token_file.empty()) {
    auto token = pkb::ReadFile(token_file);
    if (!token.ok()) {
      spdlog::error("{}", token.status().ToString());
      return 2;
    }
    o.token = std::string(absl::StripAsciiWhitespace(*token));
  }
  if (!tls_ca.empty()) {
    auto pem = pkb::ReadFile(tls_ca);
    if (!pem.ok()) {
      spdlog::error("{}", pem.status().ToString());
      return 2;
    }
    o.tls_ca = *pem;
  }

  std::vector<std::string> uuids;
  if (absl::Status st = DetectGpus(gpus, &o.capabilities, &uuids); !st.ok()) {
    spdlog::error("{}", std::string(st.message()));
    return 2;
  }
  // The engine gets the share as UUIDs (pkb-eval --gpus), which name the same GPUs however the
  // process that reads them numbers its devices.
  if (!gpus.empty()) e.gpus = absl::StrJoin(uuids, ",");
  if (!gpu_class.empty()) o.capabilities.set_gpu_class(gpu_class);
  if (o.capabilities.gpu_class().empty()) o.capabilities.set_gpu_class("cpu");
  if (o.capabilities.interconnect().empty()) o.capabilities.set_interconnect("none");
  o.capabilities.set_max_world_size(max_world_size > 0               ? max_world_size
                                    : o.capabilities.gpu_count() > 0 ? o.capabilities.gpu_count()
                                                                     : 8);
  o.capabilities.set_max_functional_world_size(max_functional_world_size);
  o.capabilities.set_hostname(host);
  o.capabilities.set_slots(1);
  // The engine runs in each job's folder: a relative path given here is this folder's.
  if (e.engine.find('/') != std::string::npos) {
    e.engine = std::filesystem::absolute(e.engine, ec).string();
  }
  if (e.engine.empty() || access(e.engine.c_str(), X_OK) != 0) {
    o.healthy = false;
    o.unhealthy_reason = absl::StrCat("no runnable engine at '", e.engine, "' (give --engine)");
    spdlog::error("{}", o.unhealthy_reason);
  }
  // A GPU node's ranks are pinned to cores of their own (core_pinning.h); its compiles keep off
  // them, so that a compile beside a timed job shares no core with it.
  const std::vector<int> allowed = pkb::AllowedCpus();
  if (o.capabilities.gpu_count() > 0 && compile_slots != 0) {
    e.background_cpus = pkb::CpusBesideRanks(
        pkb::ReadCpuTopology(allowed, "/sys/devices/system/cpu"), o.capabilities.max_world_size());
    spdlog::info("compile tasks run on CPUs {} of {}, off the ranks' cores",
                 e.background_cpus.empty() ? "any" : absl::StrJoin(e.background_cpus, ","),
                 absl::StrJoin(allowed, ","));
  }
  if (compile_slots < 0) {
    // A GPU node's compiles count the CPUs off its ranks' cores only (none: the least). A worker
    // of a share that may run on every CPU of the node shares them, and the memory, with the
    // other shares' workers; one pinned to a part of them (taskset, a cpuset) has its own CPUs.
    const int cpus = static_cast<int>(o.capabilities.gpu_count() > 0 ? e.background_cpus.size()
                                                                     : allowed.size());
    const int online = pkb::OnlineCpuCount();
    const bool whole_node = static_cast<int>(allowed.size()) >= online;
    const int node_gpus = gpus.empty() || !whole_node ? 0 : pkb::NodeGpuCount();
    const int memory_gib = pkb::MemoryGib();
    compile_slots = pkb::DefaultCompileSlots(cpus, gpus.empty() ? 0 : o.capabilities.gpu_count(),
                                             node_gpus, memory_gib);
    const std::string serves =
        gpus.empty()    ? std::string("the whole node")
        : node_gpus > 0 ? absl::StrCat("a share of ", o.capabilities.gpu_count(), " of the node's ",
                                       node_gpus, " GPUs")
                        : absl::StrCat("a share of ", o.capabilities.gpu_count(),
                                       " GPU(s), not scaled (CPUs of its own, or no driver list)");
    spdlog::info(
        "--compile-slots {}: {} CPU(s) for compiles ({} of {} online may be used), {} GiB, "
        "serving {}",
        compile_slots, cpus, allowed.size(), online, memory_gib, serves);
  }
  o.capabilities.set_compile_slots(compile_slots);
  spdlog::info("worker {}: {} x{} ({}{}), max W {} (functional {}), {} compile slot(s), engine {}",
               o.worker_id, o.capabilities.gpu_class(), o.capabilities.gpu_count(),
               o.capabilities.gpu_model(), e.gpus.empty() ? "" : ": " + e.gpus,
               o.capabilities.max_world_size(), o.capabilities.max_functional_world_size(),
               o.capabilities.compile_slots(), e.engine);

  if (health_command.empty() && o.capabilities.gpu_count() > 0) {
    health_command = absl::StrCat("test \"$(nvidia-smi --query-gpu=name --format=csv,noheader",
                                  e.gpus.empty() ? "" : " --id=" + e.gpus,
                                  " | grep -c .)\" = ", o.capabilities.gpu_count());
  }
  if (o.capabilities.gpu_count() > 0) {
    std::string engine = e.engine;
    std::string share = e.gpus;
    o.failure_health_check = [engine, share]() -> absl::Status {
      pkb::SubprocessOptions h;
      h.argv = {engine, "--gpu-selftest"};
      if (!share.empty()) h.argv.push_back("--gpus=" + share);
      h.timeout = absl::Seconds(120);
      h.merge_stderr = true;
      auto r = pkb::RunSubprocess(h);
      if (!r.ok()) return r.status();
      if (r->exit_code == 0 && !r->signaled && !r->timed_out) return absl::OkStatus();
      return absl::UnavailableError(absl::StrCat("GPU selftest after a failed job failed (",
                                                 r->Describe(), "): ", r->out.substr(0, 500)));
    };
  }
  if (!health_command.empty()) {
    o.health_check = [health_command]() -> absl::Status {
      pkb::SubprocessOptions h;
      h.argv = {"/bin/sh", "-c", health_command};
      h.timeout = absl::Seconds(60);
      h.merge_stderr = true;
      auto r = pkb::RunSubprocess(h);
      if (!r.ok()) return r.status();
      if (r->exit_code == 0 && !r->signaled && !r->timed_out) return absl::OkStatus();
      return absl::UnavailableError(absl::StrCat("health check `", health_command, "` failed (",
                                                 r->Describe(), "): ", r->out.substr(0, 500)));
    };
  }
  // READY=1 for systemd once registered; metrics when asked for.
  pkb::WorkerMetrics metrics(o.capabilities, [] { pkb::NotifySystemd("READY=1"); });
  o.observer = &metrics;
  std::unique_ptr<pkb::MetricsServer> metrics_server;
  if (!metrics_listen.empty()) {
    auto started = pkb::MetricsServer::Start(metrics_listen, metrics.registry(), {});
    if (!started.ok()) {
      spdlog::error("{}", started.status().ToString());
      return 2;
    }
    metrics_server = std::move(*started);
  }
  // Jobs' folders go under a folder of this worker's own; what dead workers left is removed.
  std::vector<std::string> removed;
  auto scratch_root = pkb::ScratchRoot::Create(e.scratch, o.worker_id, &removed);
  if (!scratch_root.ok()) {
    spdlog::error("scratch: {}", std::string(scratch_root.status().message()));
    return 2;
  }
  for (const std::string& dir : removed) spdlog::info("removed {}, left by a dead worker", dir);
  e.scratch = (*scratch_root)->path();
  pkb::EngineExecutor executor(e);
  pkb::WorkerDaemon daemon(o, &executor);
  g_daemon = &daemon;
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  // A pipe whose reader died (an engine's job FIFO) is an error of that write, not our end.
  std::signal(SIGPIPE, SIG_IGN);
  daemon.Run();
  pkb::NotifySystemd("STOPPING=1");
  return 0;
}
