// pkb-eval: evaluates one submission locally (the worker daemon runs it as a child process).
//
//   pkb-eval --problem 1 --world-size 4 my_kernel.cu          readable report
//   pkb-eval --problem 1 --world-size 4 my_kernel.cu --json   the EvalResult as JSON
//   pkb-eval ... --events                                     EvalEvents as JSON lines
//   pkb-eval --spec spec.txtpb my_kernel.cu --events         the job as a pkb.v1.EvalSpec file
//   pkb-eval --problem 1 --world-size 4 my_kernel.cu --compile-only
//                                                            policy and compile only (no GPU):
//                                                            COMPILED, COMPILE_ERROR or REJECTED
//   pkb-eval --standby 2:cpu --events < job.json              ranks started before the job,
//                                                            which comes on stdin (the worker)
//   pkb-eval --catalog                                        every problem's spec as JSON
//   pkb-eval --problem 13 --dump-inputs out/ --world-size 2   inputs and reference outputs
//
// Exit code: 0 when a verdict was produced (whatever it is; --strict: only for OK),
// 2 for usage errors, 3 for the engine's own failures, 4 when the rank processes failed after a
// verdict given before their end (it stands; stderr says how: the node may need a check).
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/eval_spec.h"
#include "common/files.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"
#include "worker/engine/dump.h"
#include "worker/engine/engine.h"
#include "worker/engine/gpu_select.h"
#include "worker/engine/standby.h"

namespace {

// `every_field`: zeros and empty values too (the catalog: rank 0 has its "rank": 0).
std::string ToJson(const google::protobuf::Message& m, bool pretty, bool every_field = false) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = pretty;
  o.always_print_primitive_fields = every_field;
  o.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

std::string InstalledDir(const std::string& rel) {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec).parent_path();
  for (auto dir = exe; !dir.empty() && dir != dir.root_path(); dir = dir.parent_path()) {
    if (std::filesystem::exists(dir / rel)) return (dir / rel).string();
  }
  return "";
}

// The job's arguments, as pkb-eval --standby reads them: one line of `from` ("-": stdin), a JSON
// array of strings.
absl::StatusOr<std::vector<std::string>> ReadJobArguments(const std::string& from) {
  std::string line;
  if (from == "-") {
    if (!std::getline(std::cin, line)) {
      return absl::InvalidArgumentError("no job arguments on stdin (it closed first)");
    }
  } else {
    // A FIFO: opening it waits for the writer.
    std::ifstream in(from);
    if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot open ", from));
    if (!std::getline(in, line)) {
      return absl::InvalidArgumentError(absl::StrCat("no job arguments in ", from));
    }
  }
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) {
    return absl::InvalidArgumentError("the job's arguments on stdin are not a JSON array");
  }
  std::vector<std::string> args;
  for (const auto& a : j) {
    if (!a.is_string()) {
      return absl::InvalidArgumentError("the job's arguments on stdin are not all strings");
    }
    args.push_back(a.get<std::string>());
  }
  return args;
}

int Main(int argc, char** argv, pkb::StandbyRanks* standby) {
  pkb::EvalOptions o;
  // The job as flags say it; --spec gives a whole one, which the flags given beside it amend.
  pkb::v1::EvalSpec flags;
  std::string source_path, dump_dir, spec_path;
  bool json = false, events = false, catalog = false, strict = false;
  CLI::App app{"Evaluate a PKB candidate on this node: compile, verify on every rank, time."};
  app.add_option("source", source_path, "the submission (.cu; .cc for CPU test candidates)");
  app.add_option("--spec", spec_path,
                 "the job's pkb.v1.EvalSpec (spec.proto), binary (.binpb), text (.txtpb) or JSON "
                 "(.json); the flags below amend it");
  app.add_option("--job-key", o.job_key,
                 "the coordinator's job key, reported as is (default: computed from the spec)");
  app.add_option_function<int32_t>(
      "--problem,-p", [&](const int32_t& v) { flags.set_problem_id(v); }, "problem id (1)");
  app.add_option_function<int32_t>(
      "--world-size,-w", [&](const int32_t& v) { flags.set_world_size(v); },
      "number of rank processes (GPUs) (1)");
  app.add_option_function<int64_t>(
      "--m", [&](const int64_t& v) { flags.set_m(v); }, "base rows (PKB --rows)");
  app.add_option_function<int64_t>(
      "--n", [&](const int64_t& v) { flags.set_n(v); }, "base columns (PKB --cols)");
  app.add_option_function<std::string>(
      "--dtype", [&](const std::string& v) { flags.set_dtype(v); }, "run dtype");
  app.add_option_function<int32_t>(
      "--trials", [&](const int32_t& v) { flags.set_trials(v); }, "seeded verification trials");
  app.add_option_function<int32_t>(
      "--warmup", [&](const int32_t& v) { flags.set_warmup(v); },
      "warm-up iterations before timing");
  app.add_option_function<int32_t>(
      "--iters", [&](const int32_t& v) { flags.set_iters(v); },
      "timed iterations (at least; see --min-window-ms)");
  app.add_option_function<double>(
      "--min-window-ms", [&](const double& v) { flags.set_min_window_ms(v); },
      "each side's timed window runs more calls than --iters until it lasts this long (10; 0: "
      "exactly --iters)");
  app.add_option_function<int64_t>(
      "--set-offset", [&](const int64_t& v) { flags.set_set_offset(v); },
      "seed offset (secret seed for ranked runs)");
  app.add_option_function<int32_t>(
      "--max-sets", [&](const int32_t& v) { flags.set_max_sets(v); },
      "cap on the timed input sets");
  app.add_option_function<double>(
      "--l2-multiple", [&](const double& v) { flags.set_l2_multiple(v); },
      "timed input sets exceed this many L2 caches");
  app.add_option_function<int32_t>(
      "--spot-checks", [&](const int32_t& v) { flags.set_spot_checks(v); },
      "timed outputs re-checked after the windows, spread over the candidate's rounds");
  app.add_option_function<std::string>(
      "--gpu-class", [&](const std::string& v) { flags.set_gpu_class(v); },
      "GPU class recorded in the job key");
  app.add_option_function<double>(
      "--timeout",
      [&](const double& v) { flags.set_run_timeout_s(static_cast<int32_t>(std::ceil(v))); },
      "wall-clock limit of the run stage, seconds");
  app.add_flag_callback(
      "--functional", [&] { flags.set_functional(true); },
      "correctness only (no speedup, never ranked): the W ranks may share this node's GPUs, with "
      "no NCCL communicator for the candidate");
  app.add_flag("!--no-baseline", o.baseline, "do not time the reference");
  app.add_option("--backend", o.backend, "cuda, cpu or auto")
      ->check(CLI::IsMember({"cuda", "cpu", "auto"}));
  app.add_option("--mpirun", o.mpirun, "OpenMPI's mpirun (CPU runs, functional GPU runs)")
      ->capture_default_str();
  app.add_option("--api-include-dir", o.api_include_dir,
                 "the folder holding pkb/candidate.h (default: include/ found above this binary)");
  app.add_option("--gencode", o.gencode, "nvcc -gencode value");
  app.add_option("--cache-dir", o.cache_dir, "compile cache folder");
  app.add_option("--scratch", o.scratch_root, "scratch folder for jobs");
  std::string gpus;
  app.add_option("--gpus", gpus,
                 "run on this share of the node's GPUs only: their UUIDs, comma-separated, as "
                 "`nvidia-smi --query-gpu=uuid --format=csv,noheader` prints them (the ranks see "
                 "only these, the sandbox binds only their device nodes, and the GPU lock is "
                 "theirs, so jobs on other shares run at the same time); default: the whole node");
  app.add_option("--include-dir,-I", o.cpu_include_dirs,
                 "extra include folder for CPU test candidates")
      ->allow_extra_args(false);
  app.add_option("--sandbox", o.sandbox,
                 "on: compile and run the submission in the bubblewrap sandbox (refuse if it "
                 "cannot be built); off: trusted sources only")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  app.add_option("--bwrap", o.bwrap, "bubblewrap binary")->capture_default_str();
  app.add_flag("--keep-scratch", o.keep_scratch, "keep the job's scratch folder");
  app.add_flag("--json", json, "print the result as JSON");
  app.add_flag("--baseline-only", o.baseline_only, "no submission: time the reference alone");
  app.add_option("--settle-baseline", o.settle_baseline,
                 "while this node's baseline for the job has fewer measurements of the reference "
                 "(at most 25 are kept), time it again in fresh processes before the speedup is "
                 "computed (the worker passes 10 for GPU jobs); 0: off")
      ->check(CLI::Range(0, 25))
      ->capture_default_str();
  double max_age_hours = absl::ToDoubleHours(o.baseline_max_age);
  app.add_option("--baseline-max-age-hours", max_age_hours,
                 "this node's baseline leaves out its measurements older than this; a job whose "
                 "reference has fewer left settles it again (--settle-baseline)")
      ->check(CLI::Range(0.01, 8760.0))
      ->capture_default_str();
  app.add_flag("--compile-only", o.compile_only,
               "the constraints, the source policy and the sandboxed, cached compile of a run, "
               "then stop: status COMPILED (or REJECTED, COMPILE_ERROR); no rank starts, no GPU "
               "is needed")
      ->excludes("--baseline-only");
  app.add_flag("!--serial-compile", o.overlap_compile,
               "start the rank processes after the compile, not while it runs");
  app.add_flag("--events", events, "print every stage event as a JSON line");
  app.add_option("--quiet-from", o.quiet_from,
                 "a FIFO where the worker says, before the job is timed, that its other work is "
                 "stopped (a line, \"quiet N\": N compile tasks ran beside the job); the judges "
                 "wait for it, 2 s at most");
  app.add_flag("--strict", strict, "exit 1 unless the verdict is OK");
  app.add_flag("--catalog", catalog, "print every problem's spec as JSON and exit");
  bool selftest = false;
  app.add_flag("--gpu-selftest", selftest,
               "run known-good work on every GPU and check it (the worker's health check after a "
               "failed job); exit 0 when healthy");
  app.add_option("--dump-inputs", dump_dir,
                 "write per-rank inputs and reference outputs (.pt) here");
  std::string standby_for, job_from = "-";
  if (standby == nullptr) {
    app.add_option("--standby", standby_for,
                   "W:BACKEND (cuda, cpu or cuda-shared): start W rank processes now for the job "
                   "to come, then read its arguments from stdin, one line, a JSON array of "
                   "strings, and run it as if they followed these; its ranks are those when "
                   "they fit (same W and backend), else fresh ones");
    app.add_option("--job-from", job_from,
                   "with --standby: read the job's arguments from this file (a FIFO) instead of "
                   "stdin");
  }
  // PKB_SANDBOX=off is for test machines where user namespaces are disabled; flags win over it.
  if (const char* env = std::getenv("PKB_SANDBOX")) o.sandbox = env;
  CLI11_PARSE(app, argc, argv);
  o.baseline_max_age = absl::Hours(max_age_hours);
  if (!gpus.empty()) {
    absl::StatusOr<std::vector<std::string>> uuids = pkb::ParseGpuUuids(gpus);
    absl::StatusOr<std::vector<int>> minors =
        uuids.ok() ? pkb::GpuMinors(*uuids) : absl::StatusOr<std::vector<int>>(uuids.status());
    if (!minors.ok()) {
      std::fprintf(stderr, "pkb-eval: %s\n", std::string(minors.status().message()).c_str());
      return 2;
    }
    o.gpus = *std::move(uuids);
    o.gpu_minors = *std::move(minors);
    // The ranks (and the GPU probe, whose kept answer is keyed by it) see only the share.
    setenv("CUDA_VISIBLE_DEVICES", absl::StrJoin(o.gpus, ",").c_str(), 1);
  }
  auto fill_paths = [&] {
    if (o.api_include_dir.empty() && !InstalledDir("include/pkb").empty())
      o.api_include_dir = std::filesystem::path(InstalledDir("include/pkb")).parent_path().string();
    if (!o.api_include_dir.empty())
      o.api_include_dir = std::filesystem::absolute(o.api_include_dir).string();
    o.torch_include_dir = InstalledDir("torch_include");
    if (const char* t = std::getenv("PKB_TORCH_INCLUDE")) o.torch_include_dir = t;
  };
  if (!standby_for.empty()) {
    // The ranks start now; the job comes on stdin. Without them (they could not start) the job
    // still runs, with ranks of its own.
    std::unique_ptr<pkb::StandbyRanks> ranks;
    int world = 0;
    const size_t colon = standby_for.find(':');
    if (colon == std::string::npos || !absl::SimpleAtoi(standby_for.substr(0, colon), &world)) {
      std::fprintf(stderr, "pkb-eval: --standby takes W:BACKEND, as 2:cuda (got '%s')\n",
                   standby_for.c_str());
      return 2;
    }
    fill_paths();
    absl::StatusOr<std::unique_ptr<pkb::StandbyRanks>> started =
        pkb::StartStandby(o, world, standby_for.substr(colon + 1));
    if (started.ok()) {
      ranks = *std::move(started);
    } else {
      std::fprintf(stderr, "pkb-eval: no standby ranks (%s); the job will start its own\n",
                   std::string(started.status().message()).c_str());
    }
    absl::StatusOr<std::vector<std::string>> job = ReadJobArguments(job_from);
    if (!job.ok()) {
      std::fprintf(stderr, "pkb-eval: %s\n", std::string(job.status().message()).c_str());
      return 2;
    }
    // These arguments less --standby and --job-from, then the job's.
    std::vector<std::string> args = {argv[0]};
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--standby" || a == "--job-from") {
        ++i;
      } else if (a.rfind("--standby=", 0) != 0 && a.rfind("--job-from=", 0) != 0) {
        args.push_back(a);
      }
    }
    args.insert(args.end(), job->begin(), job->end());
    std::vector<char*> cargs;
    for (auto& a : args) cargs.push_back(a.data());
    cargs.push_back(nullptr);
    return Main(static_cast<int>(args.size()), cargs.data(), ranks.get());
  }
  o.standby = standby;
  if (!spec_path.empty()) {
    absl::StatusOr<pkb::v1::EvalSpec> spec = pkb::ReadSpecFile(spec_path);
    if (!spec.ok()) {
      std::fprintf(stderr, "pkb-eval: %s\n", std::string(spec.status().message()).c_str());
      return 2;
    }
    o.spec = *spec;
  } else {
    // By hand, problem 1 at W = 1 unless told.
    o.spec.set_problem_id(1);
    o.spec.set_world_size(1);
  }
  o.spec.MergeFrom(flags);

  if (selftest) {
    std::error_code ec;
    auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    std::string rank = ec ? "pkb-rank" : (self.parent_path() / "pkb-rank").string();
    execl(rank.c_str(), rank.c_str(), "selftest", static_cast<char*>(nullptr));
    std::fprintf(stderr, "pkb-eval: cannot run %s\n", rank.c_str());
    return 3;
  }
  if (catalog) {
    std::cout << ToJson(pkb::BuildCatalog(), true, /*every_field=*/true) << "\n";
    return 0;
  }
  if (!dump_dir.empty()) {
    absl::Status s = pkb::DumpProblem(o, dump_dir);
    if (!s.ok()) {
      std::fprintf(stderr, "pkb-eval: %s\n", std::string(s.message()).c_str());
      return 2;
    }
    return 0;
  }
  if (source_path.empty() && !o.baseline_only) {
    std::fprintf(stderr, "pkb-eval: a source file is required (see --help)\n");
    return 2;
  }
  if (!o.baseline_only) {
    auto source = pkb::ReadFile(source_path);
    if (!source.ok()) {
      std::fprintf(stderr, "pkb-eval: %s\n", std::string(source.status().message()).c_str());
      return 2;
    }
    o.source = *source;
    o.source_name = std::filesystem::path(source_path).filename().string();
  }
  for (auto& d : o.cpu_include_dirs) d = std::filesystem::absolute(d).string();
  fill_paths();

  // The verdict is printed as it comes (DONE): it may come before the rank processes have
  // ended, and pkb-eval exits once they have.
  bool printed = false;
  auto print = [&](const pkb::v1::EvalResult& r) {
    if (json) {
      std::cout << ToJson(r, true) << "\n" << std::flush;
    } else if (!events) {
      std::cout << pkb::FormatReport(r) << std::flush;
    }
    printed = true;
  };
  auto sink = [&](const pkb::v1::EvalEvent& e) {
    if (events) {
      std::cout << ToJson(e, false) << "\n" << std::flush;
    } else if (e.stage() == pkb::v1::DONE) {
      print(e.result());
    } else if (!json) {
      std::fprintf(stderr, "[%s] %s\n", pkb::v1::Stage_Name(e.stage()).c_str(),
                   e.message().c_str());
    }
  };
  std::string after_verdict;
  pkb::v1::EvalResult r = pkb::RunEvaluation(o, sink, &after_verdict);
  if (!printed) print(r);
  if (!after_verdict.empty()) {
    // The verdict stands; the exit says the node may need a look (the worker runs its GPU
    // selftest).
    std::fprintf(stderr, "pkb-eval: after the verdict, %s\n", after_verdict.c_str());
    return 4;
  }
  if (r.status() == pkb::v1::INTERNAL) return 3;
  if (strict && r.status() != pkb::v1::OK) return 1;
  return 0;
}

}  // namespace

// The verdict is complete once Main returns (its locals, temporary folders included, are gone),
// so the process ends without running the libraries' static destructors. libtorch's teardown of
// its operator registry aborted ("free(): invalid pointer", in TorchLibraryInit's destructor) in
// a build with Ubuntu's gcc 13 on the H200 node, after every verdict had been written; the worker
// reads pkb-eval's exit status, and a finished evaluation must not end as a crash.
int main(int argc, char** argv) {
  const int rc = Main(argc, argv, nullptr);
  std::cout.flush();  // iostreams first: _Exit flushes nothing
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(rc);
}
