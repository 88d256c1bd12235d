// End-to-end tests of timing alone: the worker's word to time (pkb-eval --quiet-from), and the
// node's compiles (worker/engine/node_compiles.h), with real pkb-eval runs on CPU candidates and a
// real compile beside them.
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "common/files.h"
#include "common/quiet_word.h"
#include "common/subprocess.h"
#include "nlohmann/json.hpp"
#include "tests/engine/e2e_eval.h"

namespace pkb {
namespace {

// pkb-eval as the worker runs it (--events, --quiet-from) on `candidate`: at its BENCHMARKING
// event, `word` (a count, or nothing when negative) is told after `delay`. The DONE event's
// result, and every event's message.
struct QuietRun {
  nlohmann::json result;
  std::vector<std::string> messages;
};
QuietRun EvalWithWord(const std::string& cache, int world, int word, absl::Duration delay,
                      const std::string& candidate = "p001_correct.cc") {
  auto dir = MakeTempDir("/tmp", "pkb-quiet-");
  REQUIRE(dir.ok());
  const std::string fifo = *dir + "/quiet.fifo";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  QuietRun run;
  SubprocessOptions o;
  o.argv = {PKB_EVAL,
            "--events",
            "--quiet-from",
            fifo,
            "--cache-dir=" + cache,
            "--m=64",
            "--n=64",
            "--iters=8",
            "--warmup=3",
            "-I",
            kSrc + "/tests/engine/cpu_candidates",
            "-p",
            "1",
            "-w",
            std::to_string(world),
            Cpu(candidate)};
  o.timeout = absl::Seconds(240);
  std::thread teller;
  absl::Status told;
  o.on_stdout_line = [&](const std::string& line) {
    nlohmann::json e = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!e.is_object()) return;
    if (e.contains("message")) run.messages.push_back(e["message"]);
    if (e.value("stage", "") == "DONE") run.result = e["result"];
    if (e.value("stage", "") == "BENCHMARKING" && !teller.joinable() && word >= 0) {
      teller = std::thread([&] {
        absl::SleepFor(delay);
        told = TellQuiet(fifo, word);
      });
    }
  };
  auto r = RunSubprocess(o);
  if (teller.joinable()) teller.join();
  CHECK(told.ok());
  RemoveTree(*dir).IgnoreError();
  REQUIRE(r.ok());
  INFO(r->err);
  REQUIRE(r->exit_code == 0);
  return run;
}

TEST_CASE(
    "the judges time only after the worker's word, and compiles beside a job keep its "
    "reference out of the node's baseline",
    "[engine][e2e][quiet]") {
  auto cache = MakeTempDir("/tmp/pkb-test", "quiet-cache-");
  REQUIRE(cache.ok());
  for (int world : {1, 2}) {
    CAPTURE(world);
    // Quiet: the judges waited for the word (told 0.4 s after the event), and the job's
    // measurement joined the node's baseline.
    QuietRun quiet = EvalWithWord(*cache, world, 0, absl::Milliseconds(400));
    INFO(quiet.result.dump(1));
    REQUIRE(quiet.result["status"] == "OK");
    CHECK(quiet.result.value("compiles_beside", 0) == 0);
    const double word_s = quiet.result["stage_seconds"]["quiet_word"].get<double>();
    const double waited_s = quiet.result["stage_seconds"]["bench_quiet"].get<double>();
    CHECK(word_s >= 0.35);
    CHECK(waited_s >= 0.35);
    CHECK(waited_s < word_s + 1.0);  // the word, not rank 0's own limit (10 s), ended the wait
    const int samples = quiet.result["baseline_node_samples"].get<int>();
    // Two compiles ran beside it: the speedup uses the node's baseline as it was.
    QuietRun busy = EvalWithWord(*cache, world, 2, absl::Milliseconds(50));
    INFO(busy.result.dump(1));
    REQUIRE(busy.result["status"] == "OK");
    CHECK(busy.result["compiles_beside"] == 2);
    CHECK(busy.result["baseline_node_samples"] == samples);
    // No word: timed after the engine's wait (2 s), said so, and kept out likewise.
    QuietRun silent = EvalWithWord(*cache, world, -1, absl::ZeroDuration());
    INFO(silent.result.dump(1));
    REQUIRE(silent.result["status"] == "OK");
    CHECK(silent.result["compiles_beside"] == -1);
    CHECK(silent.result["stage_seconds"]["quiet_word"].get<double>() >= 1.9);
    CHECK(silent.result["stage_seconds"]["bench_quiet"].get<double>() < 5);  // the engine's go
    CHECK(silent.result["baseline_node_samples"] == samples);
    CHECK(std::any_of(silent.messages.begin(), silent.messages.end(), [](const std::string& m) {
      return m.find("the worker did not say within 2s") != std::string::npos;
    }));
    // And quiet again: it joins.
    QuietRun again = EvalWithWord(*cache, world, 0, absl::ZeroDuration());
    REQUIRE(again.result["status"] == "OK");
    CHECK(again.result["baseline_node_samples"] == samples + 1);
    // A submission that tries to write would-be words into every stdin pipe it can reach (it
    // fails, RUNTIME_ERROR, where it reaches one) still finds the judges waiting for the word.
    // Only in the sandbox: outside it (PKB_SANDBOX=off, scripts/test.sh where bwrap cannot run)
    // it would write into other processes' stdin on this machine.
    const char* sandbox = std::getenv("PKB_SANDBOX");
    if (sandbox != nullptr && std::string(sandbox) == "off") {
      WARN("PKB_SANDBOX=off: the forger's case needs the sandbox; not run");
      continue;
    }
    QuietRun forged =
        EvalWithWord(*cache, world, 0, absl::Milliseconds(400), "p001_quiet_forger.cc");
    INFO(forged.result.dump(1));
    REQUIRE(forged.result["status"] == "OK");
    CHECK(forged.result["stage_seconds"]["bench_quiet"].get<double>() >= 0.35);
    CHECK(forged.result["baseline_node_samples"] == samples + 2);
  }
  RemoveTree(*cache).IgnoreError();
}

// `pid` and every process descended from it (/proc's parent links), parents first.
std::vector<pid_t> ProcessTree(pid_t pid) {
  std::vector<std::pair<pid_t, pid_t>> links;  // (pid, parent)
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    auto stat = ReadFile(e.path().string() + "/stat");
    if (!stat.ok() || stat->rfind(')') == std::string::npos) continue;
    int parent = 0;
    if (sscanf(stat->c_str() + stat->rfind(')') + 1, " %*c %d", &parent) == 1) {
      links.emplace_back(std::stoi(name), parent);
    }
  }
  std::vector<pid_t> tree = {pid};
  for (size_t i = 0; i < tree.size(); ++i) {
    for (const auto& [child, parent] : links) {
      if (parent == tree[i]) tree.push_back(child);
    }
  }
  return tree;
}

TEST_CASE(
    "a compile elsewhere on the node keeps a job's reference out of the node's baseline unless "
    "it is stopped all along",
    "[engine][e2e][quiet]") {
  auto cache = MakeTempDir("/tmp/pkb-test", "node-compile-");
  REQUIRE(cache.ok());
  const std::vector<std::string> job = {
      "-p", "1", "-w", "1", "--cache-dir=" + *cache, Cpu("p001_correct.cc")};
  // Alone (its own compile is no other's): it joins the node's baseline.
  nlohmann::json alone = Eval(job);
  REQUIRE(alone["status"] == "OK");
  CHECK(alone.value("compiles_beside", 0) == 0);
  CHECK(alone["baseline_node_samples"] == 1);
  // Another worker's compile on the node (pkb-eval --compile-only, as its compile tasks run),
  // of a source that compiles for minutes.
  std::thread other([&] {
    SubprocessOptions o;
    o.argv = {PKB_EVAL,
              "--compile-only",
              "-p",
              "1",
              "-w",
              "1",
              "--cache-dir=" + *cache,
              "-I",
              kSrc + "/tests/engine/cpu_candidates",
              Cpu("p001_slow_compile.cc")};
    o.timeout = absl::Seconds(600);  // longer than the test: it ends by end_other below
    (void)RunSubprocess(o);
  });
  // The node's compiles running now: their entries' bases, "<start>.<pid>...", of the runs' files
  // with no marker of their end beside them (worker/engine/node_compiles.h).
  auto running = [&] {
    std::set<std::string> runs, ends;
    for (const auto& e : std::filesystem::directory_iterator(*cache + "/compiles")) {
      const std::string name = e.path().filename().string();
      if (absl::EndsWith(name, ".run")) runs.insert(name.substr(0, name.size() - 4));
      if (absl::EndsWith(name, ".done"))
        ends.insert(name.substr(0, name.rfind('.', name.size() - 6)));
    }
    std::vector<std::string> out;
    for (const std::string& run : runs) {
      if (!ends.count(run)) out.push_back(run);
    }
    return out;
  };
  pid_t holder = 0;
  for (absl::Time give_up = absl::Now() + absl::Seconds(60); holder == 0 && absl::Now() < give_up;
       absl::SleepFor(absl::Milliseconds(50))) {
    for (const std::string& run : running()) holder = std::stoi(run.substr(run.find('.') + 1));
  }
  auto signal_tree = [&](int sig) {
    if (holder > 0) {
      for (pid_t p : ProcessTree(holder)) kill(p, sig);
    }
  };
  auto end_other = [&] {
    signal_tree(SIGCONT);
    signal_tree(SIGKILL);
    holder = 0;
    if (other.joinable()) other.join();
  };
  absl::Cleanup ended = end_other;  // also where a check below gives up
  REQUIRE(holder > 0);
  // Whether the other compile still runs (its entry says so): it must, for what follows to mean
  // anything (its source compiles for minutes).
  auto still_compiling = [&] { return !running().empty(); };
  // Compiling beside the job: counted, though its own worker said none of its ran.
  nlohmann::json busy = Eval(job);
  QuietRun busy_word = EvalWithWord(*cache, 1, 0, absl::ZeroDuration());
  REQUIRE(still_compiling());
  // Stopped before the job began and all through it (as its worker stops it for a job of its
  // own): not beside it. Twice: a process started meanwhile is stopped by the second pass.
  signal_tree(SIGSTOP);
  signal_tree(SIGSTOP);
  absl::SleepFor(absl::Milliseconds(100));
  nlohmann::json stopped = Eval(job);
  REQUIRE(still_compiling());
  // Killed: its entry, left behind, is ended by the next reading.
  end_other();
  nlohmann::json after = Eval(job);
  INFO(busy.dump(1) << busy_word.result.dump(1) << stopped.dump(1) << after.dump(1));
  CHECK(busy["status"] == "OK");
  CHECK(busy["compiles_beside"] == 1);
  CHECK(busy["baseline_node_samples"] == 1);
  CHECK(busy_word.result["status"] == "OK");
  CHECK(busy_word.result["compiles_beside"] == 1);
  CHECK(busy_word.result["baseline_node_samples"] == 1);
  CHECK(stopped["status"] == "OK");
  CHECK(stopped.value("compiles_beside", 0) == 0);
  CHECK(stopped["baseline_node_samples"] == 2);
  CHECK(after["status"] == "OK");
  CHECK(after.value("compiles_beside", 0) == 0);
  CHECK(after["baseline_node_samples"] == 3);
  RemoveTree(*cache).IgnoreError();
}

}  // namespace
}  // namespace pkb
