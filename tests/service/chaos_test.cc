// The chaos test (issue 25): the real coordinator (SQLite in a temp dir) and three real workers
// as processes on loopback take submissions over gRPC from three submitters, while a fault thread
// kills workers (kill -9, restarted with the same id), the coordinator (kill -9, restarted on the
// same port and store) and engine process trees. Afterwards every job must have ended exactly
// once, with the verdict its source calls for, and the store must be whole; once drained, no
// process of the run may be left. The engine is fake_pkb_eval.sh, whose verdict follows markers
// in the source (correct, wrong, crashing, hanging), so each job's expected verdict is known.
//
// PKB_CHAOS_SEED=n replays a run's choices (job mix, delays, cancels, fault times and victims);
// the interleaving of the processes is the machine's. PKB_CHAOS_JOBS sets the jobs per wave (two
// waves), PKB_KEEP_TEST_DIR=1 keeps the logs and the store.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/files.h"
#include "pkb/v1/evaluation.grpc.pb.h"
#include "tests/service/child_process.h"

namespace pkb {
namespace {

// Coordinator flags. A killed worker is restarted at once under its id, so its lease is lost
// when it registers again; the lease timeout is the time a restarted coordinator waits for the
// workers to resume theirs, past their reconnect backoff. A job may lose its worker kMaxAttempts
// times before it ends WORKER_LOST: high enough that it is rare under this many kills. Hanging jobs
// that are not cancelled end by the job deadline, well past the longest honest run here (about a
// second).
constexpr int kMaxAttempts = 8;
constexpr int kJobDeadlineSeconds = 6;
constexpr int kWorkers = 3;
const char* const kSubmitters[] = {"alice", "bob", "carol"};

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

std::string ReadWhole(const std::string& path) {
  // ReadFile's stream insertion, not an istreambuf_iterator: a /proc file of a process that ends
  // meanwhile fails its read (ESRCH), which the iterator would throw.
  return ReadFile(path).value_or("");
}

using Child = ChildProcess;

struct ProcessInfo {
  pid_t pid = 0;
  pid_t pgrp = 0;
  std::vector<std::string> argv;
};

// The live processes (zombies aside) whose environment holds the entry `marker`: every process
// of one run carries it, the engines and their children included, since they inherit it.
std::vector<ProcessInfo> MarkedProcesses(const std::string& marker) {
  std::vector<ProcessInfo> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    std::vector<std::string> env = absl::StrSplit(ReadWhole(entry.path() / "environ"), '\0');
    if (std::find(env.begin(), env.end(), marker) == env.end()) continue;
    std::string stat = ReadWhole(entry.path() / "stat");
    size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::vector<std::string> fields = absl::StrSplit(stat.substr(close + 2), ' ');
    if (fields.size() < 3 || fields[0] == "Z") continue;  // state, ppid, pgrp
    ProcessInfo p;
    p.pid = std::atoi(name.c_str());
    p.pgrp = std::atoi(fields[2].c_str());
    std::vector<std::string> argv =
        absl::StrSplit(ReadWhole(entry.path() / "cmdline"), '\0', absl::SkipEmpty());
    p.argv = std::move(argv);
    found.push_back(std::move(p));
  }
  return found;
}

enum class Behaviour { kCorrect, kWrong, kCrash, kHang };

const char* Name(Behaviour b) {
  switch (b) {
    case Behaviour::kCorrect:
      return "correct";
    case Behaviour::kWrong:
      return "wrong";
    case Behaviour::kCrash:
      return "crashing";
    case Behaviour::kHang:
      return "hanging";
  }
  return "?";
}

// One Submit call of the plan, and what became of it.
struct Submission {
  int index = 0;  // in the whole run
  int wave = 0;
  int submitter = 0;
  Behaviour behaviour = Behaviour::kCorrect;
  std::string source;
  int duplicate_of = -1;       // a deliberate identical submission of this earlier one
  double gap_s = 0;            // the submitter's pause before it
  double cancel_after_s = -1;  // hanging ones: cancelled this long after submission, or never
  // Filled in while the run goes (under Run::mu).
  std::string job_id;
  absl::Time submitted;
  int failed_submits = 0;  // Submit calls that failed before one answered with the job id
  bool cancel_sent = false;
  std::vector<v1::EvalEvent> live;  // what its follower saw, reattaching after restarts
  int reattached = 0;
  bool done = false;
};

// The whole run's plan, drawn from the seed.
std::vector<Submission> Plan(uint64_t seed, int waves, int per_wave) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng);
  };
  std::vector<Submission> plan;
  for (int w = 0; w < waves; ++w) {
    for (int i = 0; i < per_wave; ++i) {
      Submission s;
      s.index = static_cast<int>(plan.size());
      s.wave = w;
      s.submitter = i % 3;
      s.gap_s = uniform(0, 1.2);
      std::vector<int> repeatable;  // this submitter's earlier correct or wrong originals
      for (const Submission& p : plan) {
        if (p.submitter == s.submitter && p.duplicate_of < 0 &&
            (p.behaviour == Behaviour::kCorrect || p.behaviour == Behaviour::kWrong))
          repeatable.push_back(p.index);
      }
      double r = uniform(0, 1);
      if (r < 0.08 && !repeatable.empty()) {
        // Half of them right after the original (joins it in flight), half later (cached).
        const Submission& o =
            plan[uniform(0, 1) < 0.5 ? repeatable.back() : repeatable[rng() % repeatable.size()]];
        s.duplicate_of = o.index;
        s.behaviour = o.behaviour;
        s.source = o.source;
        if (o.index == repeatable.back()) s.gap_s = 0;
        plan.push_back(std::move(s));
        continue;
      }
      r = uniform(0, 1);
      std::string marker;
      if (r < 0.45) {
        s.behaviour = Behaviour::kCorrect;
        marker = "FAKE_OK";
      } else if (r < 0.70) {
        s.behaviour = Behaviour::kWrong;
        marker = "FAKE_MISMATCH";
      } else if (r < 0.90) {
        s.behaviour = Behaviour::kCrash;
        marker = uniform(0, 1) < 0.5 ? "FAKE_CRASH" : "FAKE_CRASH=exit";
      } else {
        s.behaviour = Behaviour::kHang;
        marker = "FAKE_HANG";
        if (uniform(0, 1) < 0.6) s.cancel_after_s = uniform(0.3, 3.0);
      }
      // The first line makes every source distinct, so dedup keeps them apart.
      s.source = absl::StrCat("// chaos run ", seed, ", job ", s.index, " (", Name(s.behaviour),
                              ") from ", kSubmitters[s.submitter], "\n// ", marker,
                              " FAKE_DELAY=", absl::StrFormat("%.3f", uniform(0.01, 0.12)),
                              "\nextern \"C\" int pkb_chaos_", s.index, "() { return 0; }\n");
      plan.push_back(std::move(s));
    }
  }
  return plan;
}

// The coordinator and workers of one run, each restartable in place. Every process carries
// PKB_CHAOS_RUN=<its folder> in its environment; the destructor kills whatever still carries it.
class ChaosCluster {
 public:
  ChaosCluster() {
    dir_ = *MakeTempDir("/tmp", "pkb-chaos-test");
    std::filesystem::permissions(dir_, std::filesystem::perms(0711));
    marker_ = "PKB_CHAOS_RUN=" + dir_;
    workers_.resize(kWorkers);
  }
  ~ChaosCluster() {
    for (auto& w : workers_) w.reset();
    coordinator_.reset();
    for (int i = 0; i < 3; ++i) {
      for (const ProcessInfo& p : MarkedProcesses(marker_)) kill(p.pid, SIGKILL);
      absl::SleepFor(absl::Milliseconds(50));
    }
    if (!std::getenv("PKB_KEEP_TEST_DIR")) RemoveTree(dir_).IgnoreError();
  }

  const std::string& dir() const { return dir_; }
  const std::string& marker() const { return marker_; }
  std::string store() const { return dir_ + "/jobs.db"; }
  v1::Evaluation::Stub* stub() { return stub_.get(); }

  // Starts the coordinator; after the first start, on the same port and store.
  absl::Status StartCoordinator() {
    for (int attempt = 0; attempt < 10; ++attempt) {
      unlink((dir_ + "/port").c_str());
      std::vector<std::string> argv{PKB_COORDINATOR_BIN,
                                    "--listen",
                                    absl::StrCat("127.0.0.1:", port_),
                                    "--store",
                                    store(),
                                    "--engine",
                                    PKB_FAKE_ENGINE,
                                    "--heartbeat-interval",
                                    "0.2",
                                    "--lease-timeout",
                                    "10",
                                    "--max-attempts",
                                    absl::StrCat(kMaxAttempts),
                                    "--job-deadline",
                                    absl::StrCat(kJobDeadlineSeconds),
                                    "--port-file",
                                    dir_ + "/port",
                                    "--compile-ahead=true"};
      coordinator_ = std::make_unique<Child>(argv, dir_ + "/coordinator.log", Env());
      for (int i = 0; i < 500; ++i) {
        int port = std::atoi(ReadWhole(dir_ + "/port").c_str());
        if (port > 0) {
          if (port_ == 0) Connect(port);
          return absl::OkStatus();
        }
        if (coordinator_->WaitExit(absl::Milliseconds(20))) break;  // it failed: try again
      }
      coordinator_->Kill();
      absl::SleepFor(absl::Milliseconds(200));  // the port may still be held a moment
    }
    return absl::UnavailableError(absl::StrCat("the coordinator does not start on port ", port_,
                                               "; see ", dir_, "/coordinator.log"));
  }
  void KillCoordinator() { coordinator_->Kill(); }
  bool StopCoordinator(absl::Duration limit) {
    coordinator_->Terminate();
    return coordinator_->WaitExit(limit);
  }

  void StartWorker(int i) {
    std::map<std::string, std::string> env = Env();
    env["FAKE_PKB_EVAL_LOG"] = dir_ + "/engine_runs.log";
    std::string id = absl::StrCat("chaos-w", i);
    workers_[i] = std::make_unique<Child>(
        std::vector<std::string>{PKB_WORKER_BIN, "--coordinator", absl::StrCat("127.0.0.1:", port_),
                                 "--worker-id", id, "--engine", PKB_FAKE_ENGINE, "--scratch", dir_,
                                 "--gpu-class", "cpu", "--max-world-size", "8",
                                 // as on CI's 2 CPUs, whatever this machine's
                                 "--compile-slots", "2"},
        dir_ + "/worker-" + id + ".log", env);
  }
  void KillWorker(int i) { workers_[i]->Kill(); }
  // SIGTERM asks every worker to drain; true when all have left within `limit`.
  bool DrainWorkers(absl::Duration limit) {
    for (auto& w : workers_) w->Terminate();
    bool all = true;
    for (auto& w : workers_) all &= w->WaitExit(limit);
    return all;
  }

 private:
  std::map<std::string, std::string> Env() const { return {{"PKB_CHAOS_RUN", dir_}}; }
  void Connect(int port) {
    port_ = port;
    grpc::ChannelArguments args;
    // Back soon after a restart: the default backoff would leave the clients idle for seconds.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
    channel_ = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                         grpc::InsecureChannelCredentials(), args);
    stub_ = v1::Evaluation::NewStub(channel_);
  }

  std::string dir_;
  std::string marker_;
  int port_ = 0;
  std::unique_ptr<Child> coordinator_;
  std::vector<std::unique_ptr<Child>> workers_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Evaluation::Stub> stub_;
};

// What the threads of one run share. Failures are collected here and asserted by the test's own
// thread (Catch2's assertions are not thread-safe).
struct Run {
  Run(ChaosCluster* c, std::vector<Submission> p, absl::Duration budget)
      : cluster(c), plan(std::move(p)), deadline(absl::Now() + budget) {}

  void Fail(std::string what) {
    std::lock_guard<std::mutex> lock(mu);
    errors.push_back(std::move(what));
  }
  bool Expired() const { return absl::Now() > deadline; }

  ChaosCluster* cluster;
  std::mutex mu;
  std::vector<Submission> plan;  // guarded by mu once threads run
  std::vector<std::string> errors;
  std::set<std::string> engine_killed_sources;
  int worker_kills = 0, coordinator_kills = 0, engine_kills = 0, cancels = 0;
  absl::Time deadline;
};

// A refusal is final; a broken call (the coordinator was killed under it) is tried again.
bool Refused(const grpc::Status& st) {
  switch (st.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return true;
    default:
      return false;
  }
}

// Submits `s` until a Submit call answers with its job id (the QUEUED event: by then the job is
// stored), then drops the stream; its follower watches it.
void SubmitOne(Run& run, int index) {
  v1::SubmitRequest r;
  {
    std::lock_guard<std::mutex> lock(run.mu);
    const Submission& s = run.plan[index];
    r.set_problem_id(1);
    r.set_world_size(2);
    r.set_source(s.source);
    r.set_submitter(kSubmitters[s.submitter]);  // an open coordinator takes the client's word
    r.add_tags("chaos");
  }
  while (!run.Expired()) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto reader = run.cluster->stub()->Submit(&ctx, r);
    v1::EvalEvent first;
    if (reader->Read(&first)) {
      ctx.TryCancel();
      reader->Finish();
      std::lock_guard<std::mutex> lock(run.mu);
      Submission& s = run.plan[index];
      s.job_id = first.job_id();
      s.submitted = absl::Now();
      if (first.stage() != v1::QUEUED || first.sequence() != 1)
        run.errors.push_back(absl::StrCat("job ", s.job_id, ": Submit's first event is ",
                                          v1::Stage_Name(first.stage()), " #", first.sequence()));
      return;
    }
    grpc::Status st = reader->Finish();
    {
      std::lock_guard<std::mutex> lock(run.mu);
      ++run.plan[index].failed_submits;
    }
    if (Refused(st)) {
      run.Fail(absl::StrCat("submission ", index, ": Submit refused: ", st.error_message(), " (",
                            static_cast<int>(st.error_code()), ")"));
      return;
    }
    absl::SleepFor(absl::Milliseconds(150));
  }
  run.Fail(absl::StrCat("submission ", index, " was never accepted"));
}

// Follows one job with Watch to its DONE event, reattaching after the last event it saw whenever
// the stream breaks (the coordinator was killed). Each stream must continue the sequence.
void FollowOne(Run& run, int index) {
  std::string job_id;
  while (job_id.empty()) {
    {
      std::lock_guard<std::mutex> lock(run.mu);
      job_id = run.plan[index].job_id;
    }
    if (!job_id.empty()) break;
    if (run.Expired()) return;  // SubmitOne says why
    absl::SleepFor(absl::Milliseconds(50));
  }
  int64_t last = 0;
  bool first_stream = true;
  while (!run.Expired()) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::WatchRequest w;
    w.set_job_id(job_id);
    w.set_after_sequence(last);
    auto reader = run.cluster->stub()->Watch(&ctx, w);
    v1::EvalEvent e;
    bool done = false;
    std::vector<v1::EvalEvent> got;
    while (!done && reader->Read(&e)) {
      if (e.job_id() != job_id || e.sequence() <= last) {
        run.Fail(absl::StrCat("job ", job_id, ": Watch after #", last, " sent ", e.job_id(), " #",
                              e.sequence(), " ", v1::Stage_Name(e.stage())));
      }
      last = std::max(last, e.sequence());
      done = e.stage() == v1::DONE;
      got.push_back(e);
    }
    if (done) ctx.TryCancel();
    grpc::Status st = reader->Finish();
    {
      std::lock_guard<std::mutex> lock(run.mu);
      Submission& s = run.plan[index];
      s.live.insert(s.live.end(), got.begin(), got.end());
      s.done = done;
      if (!first_stream) ++s.reattached;
    }
    if (done) return;
    first_stream = false;
    if (st.error_code() == grpc::StatusCode::NOT_FOUND) {
      run.Fail(absl::StrCat("job ", job_id, " is lost: Watch says ", st.error_message()));
      return;
    }
    if (st.ok()) run.Fail(absl::StrCat("job ", job_id, ": a Watch stream ended without DONE"));
    absl::SleepFor(absl::Milliseconds(100));
  }
  run.Fail(absl::StrCat("job ", job_id, " did not reach DONE in time"));
}

// Cancels the hanging jobs that the plan cancels, when their time comes.
void CancelDue(Run& run, const std::vector<int>& wave) {
  std::vector<std::pair<int, std::string>> due;
  {
    std::lock_guard<std::mutex> lock(run.mu);
    for (int i : wave) {
      Submission& s = run.plan[i];
      if (s.cancel_after_s < 0 || s.cancel_sent || s.job_id.empty()) continue;
      if (absl::Now() < s.submitted + absl::Seconds(s.cancel_after_s)) continue;
      s.cancel_sent = true;  // whether or not the call gets through, it may have taken effect
      due.push_back({i, s.job_id});
    }
  }
  for (const auto& [i, id] : due) {
    for (int attempt = 0; attempt < 50 && !run.Expired(); ++attempt) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      v1::CancelRequest cr;
      cr.set_job_id(id);
      v1::Job job;
      grpc::Status st = run.cluster->stub()->Cancel(&ctx, cr, &job);
      if (st.ok()) break;
      if (Refused(st)) {
        run.Fail(absl::StrCat("job ", id, ": Cancel failed: ", st.error_message()));
        break;
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
    std::lock_guard<std::mutex> lock(run.mu);
    ++run.cancels;
  }
}

// Kills the process tree of one running fake engine; its job's source goes into
// engine_killed_sources (INTERNAL is then a right verdict for it). False if none runs.
bool KillOneEngine(Run& run, std::mt19937_64& rng) {
  std::vector<ProcessInfo> engines;
  for (ProcessInfo& p : MarkedProcesses(run.cluster->marker())) {
    bool fake = false;
    for (const std::string& a : p.argv) fake |= absl::EndsWith(a, "fake_pkb_eval.sh");
    if (fake && p.pgrp > 1 && p.pgrp != getpgrp()) engines.push_back(std::move(p));
  }
  if (engines.empty()) return false;
  const ProcessInfo& victim = engines[rng() % engines.size()];
  std::string source;
  for (const std::string& a : victim.argv) {
    if (absl::EndsWith(a, "/candidate.cu")) source = ReadWhole(a);
  }
  if (source.empty()) return false;  // it just ended
  {
    std::lock_guard<std::mutex> lock(run.mu);
    run.engine_killed_sources.insert(source);
    ++run.engine_kills;
  }
  kill(-victim.pgrp, SIGKILL);
  return true;
}

struct FaultPlan {
  int worker_kills = 0;
  int coordinator_kills = 0;
  int engine_kills = 0;
};

// The faults of one wave, at seeded times: worker kills about every 0.8 s, the coordinator and
// engine kills at random moments among them. Returns once all are done (or time is up).
void InjectFaults(Run& run, const FaultPlan& f, std::mt19937_64& rng,
                  const std::vector<int>& wave) {
  auto uniform = [&](double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng);
  };
  enum Kind { kWorker, kCoordinator, kEngine };
  std::vector<std::pair<double, Kind>> schedule;
  double t = 0;
  for (int i = 0; i < f.worker_kills; ++i) schedule.push_back({t += uniform(0.3, 1.3), kWorker});
  const double span = std::max(t, 5.0);
  for (int i = 0; i < f.coordinator_kills; ++i)
    schedule.push_back({span * (i + uniform(0.2, 0.8)) / f.coordinator_kills, kCoordinator});
  for (int i = 0; i < f.engine_kills; ++i) schedule.push_back({span * uniform(0.1, 0.7), kEngine});
  std::sort(schedule.begin(), schedule.end());
  absl::Time start = absl::Now();
  for (const auto& [at, kind] : schedule) {
    while (absl::Now() < start + absl::Seconds(at) && !run.Expired()) {
      CancelDue(run, wave);
      absl::SleepFor(absl::Milliseconds(20));
    }
    if (run.Expired()) return;
    switch (kind) {
      case kWorker: {
        int i = static_cast<int>(rng() % kWorkers);
        run.cluster->KillWorker(i);
        absl::SleepFor(absl::Milliseconds(static_cast<int>(uniform(0, 400))));
        run.cluster->StartWorker(i);  // the same worker id
        std::lock_guard<std::mutex> lock(run.mu);
        ++run.worker_kills;
        break;
      }
      case kCoordinator: {
        run.cluster->KillCoordinator();
        absl::SleepFor(absl::Milliseconds(static_cast<int>(uniform(100, 1000))));
        const absl::Time killed = absl::Now();
        absl::Status st = run.cluster->StartCoordinator();
        if (!st.ok()) run.Fail(std::string(st.message()));
        // The schedule waits out the restart and 6 quiet seconds: the workers come back 2-5 s
        // after a short outage (their backoff and their channel's add up), and they should
        // resume their leases rather than meet the kills due meanwhile.
        start += absl::Now() - killed + absl::Seconds(6);
        std::lock_guard<std::mutex> lock(run.mu);
        ++run.coordinator_kills;
        break;
      }
      case kEngine: {
        // Only while an engine runs: keep trying a while (cancelling what is due meanwhile).
        absl::Time give_up = absl::Now() + absl::Seconds(20);
        while (!KillOneEngine(run, rng) && absl::Now() < give_up) {
          CancelDue(run, wave);
          absl::SleepFor(absl::Milliseconds(50));
        }
        break;
      }
    }
  }
}

// Runs one wave: its submitters, one follower each, and the faults; returns once every job of the
// wave is DONE and every fault has happened.
void RunWave(Run& run, const std::vector<int>& wave, const FaultPlan& faults,
             std::mt19937_64& rng) {
  std::vector<std::thread> threads;
  for (int who = 0; who < 3; ++who) {
    std::vector<int> mine;
    for (int i : wave) {
      if (run.plan[i].submitter == who) mine.push_back(i);
    }
    threads.emplace_back([&run, mine] {
      for (int i : mine) {
        absl::SleepFor(absl::Seconds(run.plan[i].gap_s));
        SubmitOne(run, i);
      }
    });
    threads.emplace_back([&run, mine] {
      for (int i : mine) FollowOne(run, i);
    });
  }
  InjectFaults(run, faults, rng, wave);
  // The rest of the hanging jobs' cancels, while the followers finish.
  std::atomic<bool> followed{false};
  std::thread canceller([&] {
    while (!followed && !run.Expired()) {
      CancelDue(run, wave);
      absl::SleepFor(absl::Milliseconds(50));
    }
  });
  for (auto& t : threads) t.join();
  followed = true;
  canceller.join();
}

// The whole history of a job from the coordinator (Watch from 0), retried while it restarts.
std::vector<v1::EvalEvent> History(ChaosCluster& c, const std::string& job_id,
                                   grpc::Status* status) {
  for (int attempt = 0;; ++attempt) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::WatchRequest w;
    w.set_job_id(job_id);
    auto reader = c.stub()->Watch(&ctx, w);
    std::vector<v1::EvalEvent> events;
    v1::EvalEvent e;
    while (reader->Read(&e)) events.push_back(e);
    *status = reader->Finish();
    if (status->error_code() != grpc::StatusCode::UNAVAILABLE || attempt == 20) return events;
    absl::SleepFor(absl::Milliseconds(200));
  }
}

// Checks one job's history: sequence 1..n with no gap or repeat, QUEUED first, exactly one DONE
// and it last. Returns the DONE event (or nothing, after failing).
std::optional<v1::EvalEvent> CheckHistory(Run& run, const std::string& job_id,
                                          const std::vector<v1::EvalEvent>& events,
                                          const std::string& where) {
  if (events.empty()) {
    run.Fail(absl::StrCat("job ", job_id, ": no events in ", where));
    return std::nullopt;
  }
  int dones = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    dones += events[i].stage() == v1::DONE;
    if (events[i].sequence() != static_cast<int64_t>(i + 1)) {
      run.Fail(absl::StrCat("job ", job_id, ": event ", i + 1, " of ", where, " has sequence ",
                            events[i].sequence()));
      return std::nullopt;
    }
  }
  if (events.front().stage() != v1::QUEUED)
    run.Fail(absl::StrCat("job ", job_id, ": ", where, " starts with ",
                          v1::Stage_Name(events.front().stage())));
  if (dones != 1 || events.back().stage() != v1::DONE) {
    run.Fail(absl::StrCat("job ", job_id, ": ", dones, " DONE events in ", where,
                          ", the last event is ", v1::Stage_Name(events.back().stage())));
    return std::nullopt;
  }
  return events.back();
}

// The store as the stopped coordinator left it.
struct StoredJob {
  v1::Job record;
  bool done = false;
  std::string source;
  std::vector<v1::EvalEvent> events;
};

// With `integrity`, it also runs PRAGMA integrity_check and appends what it says there.
absl::StatusOr<std::map<std::string, StoredJob>> ReadStore(const std::string& path,
                                                           std::string* integrity) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    std::string why = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return absl::UnavailableError(absl::StrCat("open ", path, ": ", why));
  }
  auto query = [&](const char* sql, auto&& row) -> absl::Status {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, sql, -1, &st, nullptr) != SQLITE_OK)
      return absl::InternalError(absl::StrCat(sql, ": ", sqlite3_errmsg(db)));
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) row(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) return absl::InternalError(absl::StrCat(sql, ": ", sqlite3_errmsg(db)));
    return absl::OkStatus();
  };
  auto blob = [](sqlite3_stmt* st, int col) {
    return std::string(static_cast<const char*>(sqlite3_column_blob(st, col)),
                       sqlite3_column_bytes(st, col));
  };
  std::map<std::string, StoredJob> jobs;
  std::vector<std::string> problems;
  absl::Status s;
  if (integrity) {
    s = query("PRAGMA integrity_check", [&](sqlite3_stmt* st) {
      integrity->append(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)));
    });
  }
  if (s.ok()) {
    s = query("SELECT id, done, record, source FROM jobs", [&](sqlite3_stmt* st) {
      std::string id = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
      StoredJob& j = jobs[id];
      j.done = sqlite3_column_int(st, 1) != 0;
      if (!j.record.ParseFromString(blob(st, 2))) problems.push_back("job record " + id);
      j.source = blob(st, 3);
    });
  }
  if (s.ok()) {
    s = query("SELECT job_id, event FROM events ORDER BY job_id, seq", [&](sqlite3_stmt* st) {
      std::string id = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
      v1::EvalEvent e;
      if (!e.ParseFromString(blob(st, 1))) problems.push_back("event of " + id);
      jobs[id].events.push_back(std::move(e));  // an event of no job shows as a job w/o record
    });
  }
  sqlite3_close(db);
  if (!s.ok()) return s;
  if (!problems.empty()) return absl::DataLossError("unreadable: " + absl::StrJoin(problems, ", "));
  return jobs;
}

// Verdicts a later identical submission is answered with from the cache (server IsCacheable),
// among those this test produces; INTERNAL, CANCELLED and WORKER_LOST are never cached.
bool Cacheable(v1::Status s) { return s == v1::OK || s == v1::MISMATCH || s == v1::TIMEOUT; }

TEST_CASE("chaos: kill -9 of workers, the coordinator and engines under load loses no job",
          "[service][chaos]") {
  const uint64_t seed = std::getenv("PKB_CHAOS_SEED")
                            ? std::strtoull(std::getenv("PKB_CHAOS_SEED"), nullptr, 10)
                            : std::random_device{}();
  const int per_wave = std::max(6, EnvInt("PKB_CHAOS_JOBS", 60));
  constexpr int kWaves = 2;
  // The hostile-operator run's faults (issue 25), spread over the two waves.
  const FaultPlan faults{.worker_kills = 24, .coordinator_kills = 2, .engine_kills = 1};
  std::cout << "chaos seed " << seed << " (PKB_CHAOS_SEED=" << seed << " runs it again), " << kWaves
            << " waves of " << per_wave << " jobs" << std::endl;
  INFO("chaos seed " << seed);
  const absl::Time started = absl::Now();

  ChaosCluster cluster;
  REQUIRE(cluster.StartCoordinator().ok());
  for (int i = 0; i < kWorkers; ++i) cluster.StartWorker(i);
  Run run(&cluster, Plan(seed, kWaves, per_wave), absl::Seconds(EnvInt("PKB_CHAOS_BUDGET_S", 300)));
  std::mt19937_64 fault_rng(seed ^ 0x9e3779b97f4a7c15ULL);
  for (int w = 0; w < kWaves; ++w) {
    std::vector<int> wave;
    for (const Submission& s : run.plan) {
      if (s.wave == w) wave.push_back(s.index);
    }
    RunWave(run, wave, faults, fault_rng);
  }
  const absl::Duration chaos_time = absl::Now() - started;

  // Every job the clients know, from the coordinator: its whole history and its record.
  std::map<std::string, v1::EvalEvent> done_of;  // job id -> its DONE event
  int worker_lost = 0, cancelled = 0, timed_out = 0, engine_internal = 0, joined = 0, cached = 0,
      failed_submits = 0, reattached = 0;
  for (const Submission& s : run.plan) {
    failed_submits += s.failed_submits;
    reattached += s.reattached;
    if (s.job_id.empty()) continue;  // failed already
    const std::string who =
        absl::StrCat("job ", s.job_id, " (submission ", s.index, ", ", Name(s.behaviour), ")");
    if (!s.done) continue;  // failed already
    grpc::Status st;
    std::vector<v1::EvalEvent> history = History(cluster, s.job_id, &st);
    if (!st.ok()) run.Fail(absl::StrCat(who, ": Watch from 0 failed: ", st.error_message()));
    std::optional<v1::EvalEvent> done = CheckHistory(run, s.job_id, history, "its Watch history");
    if (!done) continue;
    // What its follower saw live is what the store kept.
    for (const v1::EvalEvent& e : s.live) {
      size_t at = static_cast<size_t>(e.sequence()) - 1;
      if (at >= history.size() || history[at].stage() != e.stage() ||
          history[at].message() != e.message())
        run.Fail(absl::StrCat(who, ": event #", e.sequence(), " seen live (",
                              v1::Stage_Name(e.stage()), ") differs from the history"));
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::GetJobRequest g;
    g.set_job_id(s.job_id);
    v1::Job job;
    st = cluster.stub()->Get(&ctx, g, &job);
    if (!st.ok() || job.stage() != v1::DONE || job.result().status() != done->result().status())
      run.Fail(absl::StrCat(who, ": Get says ", v1::Stage_Name(job.stage()), " ",
                            v1::Status_Name(job.result().status()), " (", st.error_message(), ")"));
    done_of[s.job_id] = *done;

    // The verdict its source calls for; a fault may only turn it into what that fault explains.
    const v1::Status got = done->result().status();
    std::set<v1::Status> want;
    switch (s.behaviour) {
      case Behaviour::kCorrect:
        want = {v1::OK};
        break;
      case Behaviour::kWrong:
        want = {v1::MISMATCH};
        break;
      case Behaviour::kCrash:
        want = {v1::INTERNAL};
        break;
      case Behaviour::kHang:
        want = {v1::TIMEOUT};
        if (s.cancel_sent) want.insert(v1::CANCELLED);
        break;
    }
    const bool engine_killed = run.engine_killed_sources.count(s.source) > 0;
    if (engine_killed) want.insert(v1::INTERNAL);
    if (got == v1::WORKER_LOST) {
      ++worker_lost;  // lost its worker on every attempt
      if (done->attempt() != kMaxAttempts)
        run.Fail(absl::StrCat(who, ": WORKER_LOST after ", done->attempt(), " attempts"));
    } else if (!want.count(got)) {
      run.Fail(
          absl::StrCat(who, ": verdict ", v1::Status_Name(got), ": ", done->result().message()));
    }
    cancelled += got == v1::CANCELLED;
    timed_out += got == v1::TIMEOUT;
    engine_internal += engine_killed && got == v1::INTERNAL && s.behaviour != Behaviour::kCrash;
    if (s.duplicate_of >= 0) {
      const Submission& o = run.plan[s.duplicate_of];
      if (s.job_id == o.job_id) {
        ++joined;
      } else if (done->result().cached()) {
        ++cached;
      }
    } else if (done->result().cached() && s.failed_submits == 0) {
      // (A Submit call that failed may have stored the job, which then answers the retry.)
      run.Fail(absl::StrCat(who, ": answered from the cache, yet its source is new"));
    }
  }

  // Jobs of Submit calls that failed yet were stored, and the confirmation runs the coordinator
  // queued for OK results: no client knows them; wait for their end.
  for (int i = 0; i < 300; ++i) {
    auto unfinished = ReadStore(cluster.store(), nullptr);
    bool all_done = unfinished.ok();
    if (unfinished.ok()) {
      for (const auto& [id, j] : *unfinished) all_done &= j.done;
    }
    if (all_done || run.Expired()) break;
    absl::SleepFor(absl::Milliseconds(100));
  }

  // Drain the workers, stop the coordinator: then nothing of the run may be left.
  CHECK(cluster.DrainWorkers(absl::Seconds(20)));
  CHECK(cluster.StopCoordinator(absl::Seconds(20)));
  std::vector<ProcessInfo> left;
  for (int i = 0; i < 60; ++i) {  // a short sleep of an engine killed mid-stage may linger 0.2 s
    left = MarkedProcesses(cluster.marker());
    if (left.empty()) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  for (const ProcessInfo& p : left)
    run.Fail(
        absl::StrCat("process ", p.pid, " left after the drain: ", absl::StrJoin(p.argv, " ")));

  // The store: whole, every job the clients know in it once and DONE, nothing evaluated twice.
  std::string integrity;
  absl::StatusOr<std::map<std::string, StoredJob>> stored = ReadStore(cluster.store(), &integrity);
  REQUIRE(stored.ok());
  CHECK(integrity == "ok");
  std::set<std::string> failed_sources;  // sources of Submit calls that failed at least once
  std::set<std::string> known;
  for (const Submission& s : run.plan) {
    if (s.failed_submits > 0) failed_sources.insert(s.source);
    if (s.job_id.empty()) continue;
    known.insert(s.job_id);
    auto it = stored->find(s.job_id);
    if (it == stored->end()) {
      run.Fail(absl::StrCat("job ", s.job_id, " (submission ", s.index, ") is not in the store"));
      continue;
    }
    auto d = done_of.find(s.job_id);
    if (d != done_of.end() &&
        (!it->second.done || it->second.record.result().status() != d->second.result().status() ||
         it->second.events.size() != static_cast<size_t>(d->second.sequence())))
      run.Fail(absl::StrCat("job ", s.job_id, ": the store's record or events differ from Watch"));
  }
  int extra = 0, confirmations = 0, orphan_confirmations = 0;
  std::map<std::string, std::vector<const StoredJob*>> evaluated;  // by source
  for (const auto& [id, j] : *stored) {
    if (j.record.job_id() != id) {
      run.Fail(absl::StrCat("events of job ", id, ", which has no record"));
      continue;
    }
    if (!j.done) run.Fail(absl::StrCat("job ", id, " is not DONE in the store"));
    CheckHistory(run, id, j.events, "the store's events");
    const v1::EvalResult& result = j.record.result();
    if (!j.record.confirms_job_id().empty()) {
      // A confirmation run: its original names it, or it was created just before a kill of the
      // coordinator kept its original's DONE from the store (then it ended CANCELLED at the
      // restart, and the original's own DONE named another).
      ++confirmations;
      auto o = stored->find(j.record.confirms_job_id());
      if (o == stored->end()) {
        run.Fail(absl::StrCat("confirmation run ", id, " of a job not in the store"));
      } else if (o->second.record.confirmation_job_id() != id) {
        ++orphan_confirmations;
        if (result.status() != v1::CANCELLED)
          run.Fail(absl::StrCat("confirmation run ", id, " is not its original's, yet ended ",
                                v1::Status_Name(result.status())));
      }
      continue;  // a second evaluation by design
    }
    if (j.done && result.status() == v1::OK && j.record.cached_from_job_id().empty()) {
      // Every OK original is confirmed: its confirmation run is stored (and DONE, above).
      if (j.record.confirmation_job_id().empty() || !stored->count(j.record.confirmation_job_id()))
        run.Fail(absl::StrCat("OK job ", id, " has no stored confirmation run"));
    }
    if (!known.count(id)) {
      ++extra;
      if (!failed_sources.count(j.source))
        run.Fail(absl::StrCat("job ", id, " is in the store, but no client submitted it"));
    }
    if (j.record.cached_from_job_id().empty()) evaluated[j.source].push_back(&j);
  }
  for (const auto& [source, jobs] : evaluated) {
    int cacheable = 0;
    for (const StoredJob* j : jobs) cacheable += Cacheable(j->record.result().status());
    if (cacheable > 1)
      run.Fail(absl::StrCat(jobs.size(), " evaluations of one source, ", cacheable,
                            " with a cacheable verdict (job ", jobs[0]->record.job_id(), ")"));
  }

  const std::string log = ReadWhole(cluster.dir() + "/coordinator.log");
  int resumed = 0;
  for (size_t at = log.find("resumed job"); at != std::string::npos;
       at = log.find("resumed job", at + 1))
    ++resumed;
  std::cout << "chaos seed " << seed << ": " << run.plan.size() << " submissions, "
            << stored->size() << " jobs stored (" << extra << " from failed Submit calls); "
            << run.worker_kills << " worker kills, " << run.coordinator_kills
            << " coordinator kills, " << run.engine_kills << " engine kills (" << engine_internal
            << " ended INTERNAL by it); " << run.cancels << " cancels, " << cancelled
            << " CANCELLED, " << timed_out << " TIMEOUT, " << worker_lost << " WORKER_LOST; "
            << joined << " identical submissions joined in flight, " << cached
            << " from the cache; " << confirmations << " confirmation runs ("
            << orphan_confirmations << " cancelled at a restart); " << failed_submits
            << " Submit calls retried, " << reattached << " Watch reattachments; " << resumed
            << " leases resumed by a restarted coordinator; " << absl::FormatDuration(chaos_time)
            << " of chaos, " << absl::FormatDuration(absl::Now() - started) << " in all; "
            << run.errors.size() << " failures" << std::endl;
  CHECK(run.worker_kills == kWaves * faults.worker_kills);
  CHECK(run.coordinator_kills == kWaves * faults.coordinator_kills);
  CHECK(run.engine_kills == kWaves * faults.engine_kills);
  CHECK(joined + cached > 0);  // dedup was exercised
  size_t shown = 0;
  for (const std::string& e : run.errors) {
    if (++shown > 40) break;
    FAIL_CHECK(e);
  }
  if (!run.errors.empty())
    FAIL_CHECK(run.errors.size() << " failures; PKB_KEEP_TEST_DIR=1 keeps the logs and store");
}

}  // namespace
}  // namespace pkb
