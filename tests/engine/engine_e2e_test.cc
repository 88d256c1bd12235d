// End-to-end tests of pkb-eval on this machine: real compiles (nvcc for the .cu examples, g++
// for CPU test candidates), real rank processes under mpirun, real verdicts. Without a GPU the
// .cu examples must stop at NO_DEVICE (or COMPILE_ERROR), never pretend to a verdict.
#include <stdlib.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/files.h"
#include "common/subprocess.h"
#include "nlohmann/json.hpp"
#include "tests/engine/e2e_eval.h"

namespace pkb {
namespace {

TEST_CASE("CPU candidates get their verdicts at W = 1, 2, 4", "[engine][e2e]") {
  struct Case {
    const char* file;
    const char* status;
  } cases[] = {
      {"p001_correct.cc", "OK"},
      {"p001_wrong.cc", "MISMATCH"},
      {"p001_constant.cc", "MISMATCH"},
      {"p001_unwritten.cc", "MISMATCH"},
      {"p001_mutates_input.cc", "MISMATCH"},
      {"p001_crash.cc", "RUNTIME_ERROR"},
      {"p001_error.cc", "RUNTIME_ERROR"},
      {"p001_no_version.cc", "RUNTIME_ERROR"},
  };
  for (int w : {1, 2, 4}) {
    for (const auto& c : cases) {
      // A constant answer W(W+1)/2 is right at W = 1 only where PKB's inputs are all ones:
      // trial 1's random inputs catch it anyway.
      auto j = Eval({"-p", "1", "-w", std::to_string(w), Cpu(c.file)});
      INFO(c.file << " at W=" << w << ": " << j.dump(1));
      CHECK(j["status"] == c.status);
    }
  }
}

TEST_CASE("a window runs more calls than --iters until it lasts --min-window-ms", "[engine][e2e]") {
  // 0: exactly --iters, PKB's count.
  auto exact = Eval({"-p", "1", "-w", "2", "--min-window-ms=0", Cpu("p001_correct.cc")});
  REQUIRE(exact["status"] == "OK");
  CHECK(exact["candidate"]["iterations"] == 8);
  CHECK(exact["candidate"]["samples"] == 8 * 5);  // 5 rounds
  CHECK(exact["baseline"]["iterations"] == 8);
  CHECK(exact["baseline"]["samples"] == 8 * 5);
  // 300 ms: a 64 x 64 call takes well under 300 / 8 ms on any CPU, so both windows grow (how
  // long each then lasts depends on the warm-up's estimate, which a loaded machine inflates: not
  // checked here; docs/benchmarks.md has measured lengths).
  auto longer =
      Eval({"-p", "1", "-w", "2", "--warmup=40", "--min-window-ms=300", Cpu("p001_correct.cc")});
  REQUIRE(longer["status"] == "OK");
  for (const char* side : {"candidate", "baseline"}) {
    INFO(side << ": " << longer[side].dump());
    const int calls = longer[side]["iterations"].get<int>();
    CHECK(calls > 8);
    CHECK(calls <= 10000);
    // Events on every stride-th call, stride = ceil(calls / iters): about --iters of them.
    const int stride = (calls + 7) / 8, marked = (calls + stride - 1) / stride;
    CHECK(marked <= 8);
    CHECK(marked > 4);
    CHECK(longer[side]["samples"] == marked * 5);  // each side in 5 rounds
  }
  // Out of bounds: a clear refusal before anything runs.
  auto bad = Eval({"-p", "1", "-w", "1", "--min-window-ms=5000", Cpu("p001_correct.cc")});
  CHECK(bad["status"] == "REJECTED");
  CHECK(bad["message"].get<std::string>().find("min_window_ms: 5000 is outside 0..1000") !=
        std::string::npos);
}

TEST_CASE("rounds whose input sets change sizes are placed in arenas of their own",
          "[engine][e2e]") {
  // Problem 85's odd ranks have empty shards when set mod 4 = 3, so its output sizes follow the
  // set; with 3 sets, round r's sets are 1000 + 3r + s: no round has the sizes of the one before.
  auto j = Eval({"-p", "85", "-w", "2", "--dtype=float32", "--max-sets=3", Cpu("p085_sort.cc")});
  INFO(j.dump(1));
  REQUIRE(j["status"] == "OK");
  CHECK(j["candidate"]["input_sets"] == 3);
  CHECK(j["candidate"]["round_wall_per_iter_us"].size() == 5);
  // The same sets' sizes from round to round (W = 1: no empty shard): the slots are reused.
  auto one = Eval({"-p", "85", "-w", "1", "--dtype=float32", "--max-sets=3", Cpu("p085_sort.cc")});
  INFO(one.dump(1));
  CHECK(one["status"] == "OK");
}

TEST_CASE("an OK CPU result carries timings of both sides and every trial", "[engine][e2e]") {
  // A cache of its own: a compile of another test in the shared one, beside this job, would keep
  // its reference out of the node's baseline (and baseline_node_us out of the result).
  auto cache = MakeTempDir("/tmp/pkb-test", "timings-cache-");
  REQUIRE(cache.ok());
  auto j = Eval({"-p", "1", "-w", "2", "--cache-dir=" + *cache, Cpu("p001_correct.cc")});
  (void)RemoveTree(*cache);
  INFO(j.dump(1));
  REQUIRE(j["status"] == "OK");
  CHECK(j.value("compiles_beside", 0) == 0);  // none counted (a zero is left out of the JSON)
  // Windows of at least --iters calls (more where 8 would last under min_window_ms, 20 ms).
  const int cand_calls = j["candidate"]["iterations"].get<int>();
  const int base_calls = j["baseline"]["iterations"].get<int>();
  CHECK(cand_calls >= 8);
  CHECK(base_calls >= 8);
  // Events on about --iters of each window's calls (every ceil(calls / 8)-th).
  auto marked = [](int calls) { return (calls + (calls + 7) / 8 - 1) / ((calls + 7) / 8); };
  CHECK(j["candidate"]["samples"] == marked(cand_calls) * 5);  // both sides in 5 rounds
  CHECK(j["baseline"]["samples"] == marked(base_calls) * 5);
  CHECK(j["baseline"]["round_wall_per_iter_us"].size() == 5);
  CHECK(j["candidate"]["round_wall_per_iter_us"].size() == 5);
  // The candidate's figure is its median round.
  std::vector<double> rounds = j["candidate"]["round_wall_per_iter_us"];
  std::sort(rounds.begin(), rounds.end());
  CHECK(j["candidate"]["wall_per_iter_us"].get<double>() == Approx(rounds[2]));
  // The 3 spot checks: one of each kind in each round, and each round's last call (distinct
  // iterations: 1 to 3 a round, as the random picks fall).
  CHECK(j["candidate"]["spot_checks"].get<int>() >= 5);
  CHECK(j["candidate"]["spot_checks"].get<int>() <= 15);
  CHECK(j["candidate"]["per_rank_median_us"].size() == 2);
  CHECK(j["candidate"]["input_sets"].get<int>() >= 2);
  // The score: both sides on the judges' clocks, the baseline the node's (this job's included).
  const double cand = j["candidate"]["wall_per_iter_us"].get<double>();
  const double node = j["baseline_node_us"].get<double>();
  CHECK(cand > 0);
  CHECK(j["baseline_node_samples"].get<int>() >= 1);
  CHECK(j["speedup"].get<double>() == Approx(node / cand));
  CHECK(j["speedup_low"].get<double>() <= j["speedup"].get<double>());
  CHECK(j["speedup_high"].get<double>() >= j["speedup"].get<double>());
  CHECK(j["rank_trials"].size() == 10);  // 5 trials x 2 ranks, every output compared
  // Where the ranks' time went outside their stages: their start after the spec, and their exit
  // where the verdict waited for it (it is given as soon as every report is in, which is before
  // the ranks have ended unless they ended within the launcher's poll; launcher_test).
  CHECK(j["stage_seconds"]["rank_spec_wait"].get<double>() >= 0);
  if (j["stage_seconds"].contains("rank_exit")) {
    CHECK(j["stage_seconds"]["rank_exit"].get<double>() >= 0);
  }
  CHECK(j["job_key"].get<std::string>().size() == 64);
  // The profile pass ran on both ranks, both sides (one more call of each); on CPU its notes say
  // there is no GPU profile.
  REQUIRE(j["profiles"].size() == 2);
  for (const auto& p : j["profiles"]) {
    CHECK(p["candidate"]["note"] == "no GPU profile on this device");
    CHECK(p["reference"]["note"] == "no GPU profile on this device");
  }
  CHECK(j["profiles"][1]["rank"] == 1);
  // The ranks' set-up after the spec, stage by stage (the slowest rank's).
  for (const char* stage : {"rank_device", "rank_comms", "host_ready", "host_load"}) {
    INFO(stage);
    REQUIRE(j["stage_seconds"].contains(stage));
    CHECK(j["stage_seconds"][stage].get<double>() >= 0);
    CHECK(j["stage_seconds"][stage].get<double>() < j["stage_seconds"]["run"].get<double>());
  }
  CHECK(j["stage_seconds"]["rank_comms"].get<double>() > 0);  // MPI communicators
  // The benchmark in parts (the slowest rank's each): they add up to no more than the whole.
  double parts = 0;
  for (const char* part : {"bench_inputs", "bench_warmup", "bench_window", "bench_checks",
                           "bench_reference", "bench_profile"}) {
    INFO(part);
    REQUIRE(j["stage_seconds"].contains(part));
    CHECK(j["stage_seconds"][part].get<double>() > 0);
    parts += j["stage_seconds"][part].get<double>();
  }
  // Each part is the slowest rank's, so their sum may pass one rank's whole by a little.
  CHECK(parts <= 2 * j["stage_seconds"]["benchmark"].get<double>());
}

TEST_CASE("a functional run judges correctness only in a short window", "[engine][e2e]") {
  // OK: no reference timing, no speedup, the candidate's window capped (kFunctionalIters).
  auto j = Eval({"-p", "1", "-w", "4", "--functional", "--iters=50", Cpu("p001_correct.cc")});
  INFO(j.dump(1));
  REQUIRE(j["status"] == "OK");
  CHECK(j["functional"] == true);
  CHECK(!j.contains("speedup"));
  CHECK(!j.contains("baseline"));
  CHECK(j["candidate"]["samples"] == 20);
  CHECK(j["message"].get<std::string>().find("functional run: correct on 4 rank(s)") == 0);
  // Its key is not a ranked run's.
  auto ranked = Eval({"-p", "1", "-w", "4", "--iters=50", Cpu("p001_correct.cc")});
  CHECK(ranked["job_key"] != j["job_key"]);
  CHECK(!ranked.contains("functional"));
  // Wrong answers are still caught, in the trials and in the timed iterations.
  CHECK(Eval({"-p", "1", "-w", "2", "--functional", Cpu("p001_wrong.cc")})["status"] == "MISMATCH");
  CHECK(Eval({"-p", "1", "-w", "2", "--functional", Cpu("p001_crash.cc")})["status"] ==
        "RUNTIME_ERROR");
  CHECK(Eval({"-p", "1", "-w", "2", "--functional", "--baseline-only"})["status"] == "REJECTED");
}

TEST_CASE("diagnostics of a failure name the rank, trial and element", "[engine][e2e]") {
  auto j = Eval({"-p", "1", "-w", "2", Cpu("p001_unwritten.cc")});
  REQUIRE(j["status"] == "MISMATCH");
  auto out = j["rank_trials"][0]["outputs"][0];
  CHECK(out["unwritten_count"] == "1");
  CHECK(out["first_bad_index"] == std::to_string(64 * 64 - 1));
}

TEST_CASE("a hanging rank is killed at the limit: TIMEOUT", "[engine][e2e]") {
  auto j = Eval({"-p", "1", "-w", "2", "--timeout=4", Cpu("p001_hang.cc")});
  CHECK(j["status"] == "TIMEOUT");
}

TEST_CASE("the ranks start while the source compiles and a compile error calls them off",
          "[engine][e2e][overlap]") {
  // A compile of seconds (ATen included), in a cache folder of its own so that it really runs.
  auto cache = MakeTempDir("/tmp/pkb-test", "overlap-cache-");
  REQUIRE(cache.ok());
  auto j = Eval({"-p", "1", "-w", "2", "--cache-dir=" + *cache, Cpu("p001_aten.cc")});
  INFO(j.dump(1));
  REQUIRE(j["status"] == "OK");
  REQUIRE(j["compile"]["cache_hit"] != true);
  const auto& stages = j["stage_seconds"];
  const double compile = stages["compile"].get<double>();
  CHECK(compile > 1.0);
  // The ranks ran during the compile, until it was over (their gate opened only then).
  REQUIRE(stages.contains("ranks_during_compile"));
  CHECK(stages["ranks_during_compile"].get<double>() >= 0.9 * compile);
  CHECK(stages["run"].get<double>() >= stages["ranks_during_compile"].get<double>());

  // The same source one stage after the other: the same verdict, nothing overlapped.
  auto serial = Eval(
      {"-p", "1", "-w", "2", "--cache-dir=" + *cache, "--serial-compile", Cpu("p001_aten.cc")});
  CHECK(serial["status"] == "OK");
  CHECK(!serial["stage_seconds"].contains("ranks_during_compile"));

  // A compile error: the ranks already started are killed at once, and the verdict is the
  // compiler's, with its diagnostics.
  const std::string broken = *cache + "/p001_broken.cc";
  REQUIRE(WriteFileAtomic(broken, ReadFile(Cpu("p001_correct.cc")).value() + "\nint x = ;\n").ok());
  auto e = Eval({"-p", "1", "-w", "2", "--cache-dir=" + *cache, broken});
  INFO(e.dump(1));
  CHECK(e["status"] == "COMPILE_ERROR");
  CHECK(e["compile"]["diagnostics"].size() >= 1);
  CHECK(!e.contains("rank_trials"));
  CHECK(e["total_seconds"].get<double>() < 5.0);
  (void)RemoveTree(*cache);
}

TEST_CASE("a candidate with pkb/aten_core.h and an op's own header compiles and runs: OK",
          "[engine][e2e]") {
  // ATen's core and one op (at::clone), without <ATen/ATen.h>: the op resolves in the libtorch
  // the rank process has loaded.
  auto cache = MakeTempDir("/tmp/pkb-test", "aten-core-cache-");
  REQUIRE(cache.ok());
  auto j = Eval({"-p", "1", "-w", "2", "--cache-dir=" + *cache, Cpu("p001_aten_core.cc")});
  INFO(j.dump(1));
  CHECK(j["status"] == "OK");
  CHECK(j["compile"]["cache_hit"] != true);
  (void)RemoveTree(*cache);
}

// pkb-eval --standby W:cpu with the job's arguments in a file (the worker uses a FIFO).
nlohmann::json Standby(const std::string& shape, const std::vector<std::string>& job,
                       const std::string& dir) {
  const std::string job_file = dir + "/job.json";
  REQUIRE(WriteFileAtomic(job_file, nlohmann::json(job).dump() + "\n").ok());
  return RunEvalJson({PKB_EVAL, "--standby", shape, "--job-from", job_file, "-I",
                      kSrc + "/tests/engine/cpu_candidates", "--json"});
}

TEST_CASE("pkb-eval --standby: ranks started before the job take it when it fits",
          "[engine][e2e][standby]") {
  auto dir = MakeTempDir("/tmp/pkb-test", "standby-");
  REQUIRE(dir.ok());
  const std::vector<std::string> small = {"--m=64", "--n=64", "--warmup=3", "--iters=8"};
  auto job = [&](const std::string& w, const std::string& file) {
    std::vector<std::string> a = {"-p", "1", "-w", w};
    a.insert(a.end(), small.begin(), small.end());
    a.push_back(Cpu(file));
    return a;
  };
  // The same W: the standby ranks are adopted, and the verdicts are those of any run.
  auto ok = Standby("2:cpu", job("2", "p001_correct.cc"), *dir);
  INFO(ok.dump(1));
  CHECK(ok["status"] == "OK");
  CHECK(ok["stage_seconds"].contains("ranks_ahead_of_job"));
  // Their devices, and their hosts', were set up while they waited (pkb-rank --device-early).
  CHECK(ok["stage_seconds"].contains("rank_early"));
  CHECK(ok["rank_trials"].size() == 10);
  CHECK(Standby("2:cpu", job("2", "p001_wrong.cc"), *dir)["status"] == "MISMATCH");
  CHECK(Standby("2:cpu", job("2", "p001_crash.cc"), *dir)["status"] == "RUNTIME_ERROR");
  // Another W: they are replaced by ranks of the job's own.
  auto other = Standby("4:cpu", job("2", "p001_correct.cc"), *dir);
  CHECK(other["status"] == "OK");
  CHECK(!other["stage_seconds"].contains("ranks_ahead_of_job"));
  CHECK(!other["stage_seconds"].contains("rank_early"));
  // A job that ends before its ranks run (the compiler fails): they are killed with it.
  const std::string broken = *dir + "/p001_broken.cc";
  REQUIRE(WriteFileAtomic(broken, ReadFile(Cpu("p001_correct.cc")).value() + "\nint x = ;\n").ok());
  std::vector<std::string> bad = {"-p", "1", "-w", "2", "--cache-dir=" + *dir + "/cache", broken};
  CHECK(Standby("2:cpu", bad, *dir)["status"] == "COMPILE_ERROR");
  // Job arguments that are not a JSON array of strings: a usage error, nothing run.
  REQUIRE(WriteFileAtomic(*dir + "/bad.json", "{\"not\": \"an array\"}\n").ok());
  SubprocessOptions o;
  o.argv = {PKB_EVAL, "--standby", "2:cpu", "--job-from", *dir + "/bad.json"};
  o.timeout = absl::Seconds(60);
  auto r = RunSubprocess(o);
  REQUIRE(r.ok());
  CHECK(r->exit_code == 2);
  CHECK(r->err.find("not a JSON array") != std::string::npos);
  (void)RemoveTree(*dir);
}

TEST_CASE("pkb-eval --settle-baseline: a thin node baseline is measured again in fresh processes",
          "[engine][e2e]") {
  auto dir = MakeTempDir("/tmp/pkb-test", "settle-");
  REQUIRE(dir.ok());
  const std::string cache = "--cache-dir=" + *dir + "/cache";
  const std::vector<std::string> job = {
      "-p", "1", "-w", "2", cache, "--settle-baseline=3", Cpu("p001_correct.cc")};
  // A fresh node: this job's measurement and two reference-only runs.
  auto first = Eval(job);
  INFO(first.dump(1));
  CHECK(first["status"] == "OK");
  CHECK(first["baseline_node_samples"] == 3);
  REQUIRE(first["stage_seconds"].contains("baseline_settle"));
  CHECK(first["stage_seconds"]["baseline_settle"].get<double>() > 0);
  // Settled: the next job adds its own and times nothing more.
  auto second = Eval(job);
  CHECK(second["status"] == "OK");
  CHECK(second["baseline_node_samples"] == 4);
  CHECK(!second["stage_seconds"].contains("baseline_settle"));
  // A day later (the store's lines dated back 25 hours): they aged out, and the node settles
  // the baseline again.
  const int64_t day_ago = absl::ToUnixSeconds(absl::Now() - absl::Hours(25));
  for (const auto& f : std::filesystem::directory_iterator(*dir + "/cache/baselines")) {
    auto text = ReadFile(f.path().string());
    REQUIRE(text.ok());
    std::string aged;
    for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
      aged += std::string(line.substr(0, line.find(' '))) + " " + std::to_string(day_ago) + "\n";
    }
    REQUIRE(WriteFileAtomic(f.path().string(), aged).ok());
  }
  auto later = Eval(job);
  CHECK(later["status"] == "OK");
  CHECK(later["baseline_node_samples"] == 3);
  CHECK(later["stage_seconds"].contains("baseline_settle"));
  // With a limit of two days they are still the node's.
  std::vector<std::string> patient = job;
  patient.insert(patient.begin(), "--baseline-max-age-hours=48");
  CHECK(Eval(patient)["baseline_node_samples"] == 8);
  // Off (the default): each job adds its one.
  auto off = Eval({"-p", "1", "-w", "2", "--cache-dir=" + *dir + "/other", Cpu("p001_correct.cc")});
  CHECK(off["baseline_node_samples"] == 1);
  CHECK(!off["stage_seconds"].contains("baseline_settle"));
  (void)RemoveTree(*dir);
}

TEST_CASE("constraints are checked before anything runs", "[engine][e2e]") {
  auto j = Eval({"-p", "49", "-w", "1", Cpu("p001_correct.cc")});
  CHECK(j["status"] == "REJECTED");
  CHECK(j["message"].get<std::string>().find("W >= 2") != std::string::npos);
  auto k = Eval({"-p", "999", "-w", "1", Cpu("p001_correct.cc")});
  CHECK(k["status"] == "REJECTED");
  CHECK(k["message"].get<std::string>().find("unknown problem 999") != std::string::npos);
}

TEST_CASE("the .cu examples compile with nvcc, without a GPU nothing pretends", "[engine][nvcc]") {
  for (const char* ex : {"p001_allreduce", "p002_allgather"}) {
    std::string base = kSrc + "/problems/examples/" + ex;
    int id = std::string(ex) == "p001_allreduce" ? 1 : 2;
    auto good = Eval({"-p", std::to_string(id), "-w", "1", base + "_symm.cu", "--backend=cuda"});
    INFO(good.dump(1));
    CHECK((good["status"] == "NO_DEVICE" || good["status"] == "OK"));
    CHECK(good["compile"]["ok"] == true);
    auto broken = Eval({"-p", std::to_string(id), "-w", "1", base + "_broken.cu"});
    CHECK(broken["status"] == "COMPILE_ERROR");
    CHECK(broken["compile"]["diagnostics"][0]["file"] == std::string(ex) + "_broken.cu");
  }
}

// Writes `text` to a fresh file named `name` in a folder of its own; its path.
std::string TempSource(const std::string& name, const std::string& text) {
  char dir[] = "/tmp/pkb-e2e-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  std::string path = std::string(dir) + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST_CASE("the engine's --compile-only: the policy and the real compile then COMPILED and no rank",
          "[engine][nvcc]") {
  // nvcc: a good example compiles (on this GPU-less machine: COMPILED, not NO_DEVICE).
  auto good = Eval(
      {"-p", "1", "-w", "2", kSrc + "/problems/examples/p001_allreduce_symm.cu", "--compile-only"});
  INFO(good.dump(1));
  CHECK(good["status"] == "COMPILED");
  CHECK(good["compile"]["ok"] == true);
  CHECK(good["compile"]["command"].get<std::string>().find("nvcc") != std::string::npos);
  CHECK(good["message"].get<std::string>().find("nothing was run") != std::string::npos);
  CHECK_FALSE(good.contains("rank_trials"));
  CHECK_FALSE(good.contains("candidate"));
  // A syntax error: COMPILE_ERROR with the diagnostic's line in the submission's name.
  const std::string broken = TempSource("syntax.cu",
                                        "#include <pkb/candidate.h>\n"
                                        "PKB_CANDIDATE_API_V1;\n"
                                        "int f() {\n"
                                        "  return 0\n"
                                        "}\n");
  auto bad = Eval({"-p", "1", "-w", "2", broken, "--compile-only"});
  INFO(bad.dump(1));
  CHECK(bad["status"] == "COMPILE_ERROR");
  REQUIRE(bad["compile"]["diagnostics"].size() >= 1);
  CHECK(bad["compile"]["diagnostics"][0]["file"] == "syntax.cu");
  CHECK((bad["compile"]["diagnostics"][0]["line"] == 4 ||
         bad["compile"]["diagnostics"][0]["line"] == 5));
  CHECK(bad["compile"]["log"].get<std::string>().find("syntax.cu") != std::string::npos);
  // The source policy first: REJECTED with its findings, nothing compiled.
  const std::string env = TempSource("env.cu",
                                     "#include <cstdlib>\n"
                                     "int f() { return getenv(\"HOME\") != 0; }\n");
  auto policy = Eval({"-p", "1", "-w", "2", env, "--compile-only"});
  INFO(policy.dump(1));
  CHECK(policy["status"] == "REJECTED");
  REQUIRE(policy["policy_findings"].size() >= 1);
  CHECK(policy["policy_findings"][0]["line"] == 2);
  CHECK_FALSE(policy.contains("compile"));
  // g++ for a cpp candidate, the same way.
  auto cpp = Eval({"-p", "1", "-w", "2", Cpu("p001_correct.cc"), "--compile-only"});
  INFO(cpp.dump(1));
  CHECK(cpp["status"] == "COMPILED");
  CHECK(cpp["compile"]["command"].get<std::string>().find("g++") != std::string::npos);
  CHECK_FALSE(cpp.contains("rank_trials"));
  for (const std::string& f : {broken, env})
    std::filesystem::remove_all(std::filesystem::path(f).parent_path());
}

TEST_CASE("the catalog lists every problem with layouts and tolerances", "[engine]") {
  SubprocessOptions o;
  o.argv = {PKB_EVAL, "--catalog"};
  o.max_output_bytes = 64 << 20;  // as the coordinator reads it: 87 problems are 1.6 MB of JSON
  auto r = RunSubprocess(o);
  REQUIRE(r.ok());
  REQUIRE(r->exit_code == 0);
  auto j = nlohmann::json::parse(r->out);
  REQUIRE(j["problems"].size() >= 11);
  for (const auto& p : j["problems"]) {
    CHECK(p["statement"].get<std::string>().size() > 50);
    CHECK(p["layouts"].size() == 4);
    CHECK(p["tolerances"].size() >= 1);
    // What docs/candidate-api.md promises of the JSON: every field, rank 0's rank included.
    for (const auto& l : p["layouts"]) {
      if (!l["supported"].get<bool>()) continue;
      REQUIRE(l["ranks"].size() >= 1);
      CHECK(l["ranks"][0]["rank"] == 0);
      for (const auto& s : l["ranks"][0]["scalars"]) {
        if (s["kind"] == "int") CHECK(std::stod(s["i"].get<std::string>()) == s["value"]);
        if (s["kind"] == "float") CHECK(s["f"] == s["value"]);
      }
    }
    // busbw / algbw per W: 2 (W - 1) / W for the all-reduce.
    if (p["id"] == 1) {
      CHECK(p["layouts"][1]["world_size"] == 2);
      CHECK(p["layouts"][1]["busbw_factor"].get<double>() == Approx(1.0));
      CHECK(p["layouts"][3]["busbw_factor"].get<double>() == Approx(1.75));
    }
  }
}

}  // namespace
}  // namespace pkb

namespace pkb {
namespace {

TEST_CASE("the selftest runs known-good work and says so", "[engine]") {
  SubprocessOptions o;
  o.argv = {PKB_EVAL, "--gpu-selftest"};
  o.timeout = absl::Seconds(120);
  auto r = RunSubprocess(o);
  REQUIRE(r.ok());
  INFO(r->out << r->err);
  CHECK(r->exit_code == 0);
  CHECK(r->out.find("selftest ok") != std::string::npos);
}

}  // namespace
}  // namespace pkb
