// The evaluation's rank processes and its verdict (evaluation.h).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/eval_spec.h"
#include "common/files.h"
#include "common/harness_version.h"
#include "common/hash.h"
#include "common/status_macros.h"
#include "common/subprocess.h"
#include "problems/harness/check.h"
#include "problems/harness/inputs.h"
#include "problems/harness/registry.h"
#include "worker/engine/baseline_store.h"
#include "worker/engine/compiler.h"
#include "worker/engine/evaluation.h"
#include "worker/engine/gpu_lock.h"
#include "worker/engine/gpu_probe.h"
#include "worker/engine/launcher.h"
#include "worker/engine/profiler.h"
#include "worker/engine/rank_launch.h"
#include "worker/engine/sandbox.h"
#include "worker/engine/standby.h"
#include "worker/engine/static_check.h"
#include "worker/engine/verdict.h"

namespace pkb {
namespace {

// A rank's report key, readable by the sandbox's uid only (it deletes the file on reading).
absl::Status WriteReportKey(const std::string& path, const std::string& key,
                            const SandboxPolicy* sandbox) {
  if (key.size() != 32) return absl::InternalError("no random bytes for the report keys");
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    return absl::InternalError(absl::StrCat("cannot create ", path, ": ", strerror(errno)));
  bool ok = write(fd, key.data(), key.size()) == static_cast<ssize_t>(key.size());
  if (ok && sandbox && geteuid() == 0) ok = fchown(fd, sandbox->uid, sandbox->gid) == 0;
  close(fd);
  if (!ok) return absl::InternalError(absl::StrCat("cannot write ", path, ": ", strerror(errno)));
  return absl::OkStatus();
}

}  // namespace

std::optional<Verdict> Evaluation::RunRanks(bool gated) {
  // Listening before any rank can reach its timing: the worker's word is written once.
  if (!o_.quiet_from.empty()) {
    absl::StatusOr<QuietListener> listener = QuietListener::Open(o_.quiet_from);
    if (!listener.ok()) return End(v1::INTERNAL, std::string(listener.status().message()));
    quiet_ = *std::move(listener);
  }
  // The job's side of the launch: its limit, its gate, its progress.
  StandbyRanks::Hooks hooks;
  hooks.timeout = absl::Seconds(run_.run_timeout_s());
  if (gated) {
    // Polled by the launcher: its events come between the ranks' (one thread at a time).
    hooks.gate = [this] {
      if (!CompileDone()) return Gate::kClosed;
      std::lock_guard<std::mutex> lock(compile_mu_);
      if (!outcome_.compiled.ok() || !outcome_.compiled->report.ok() || !outcome_.placed.ok()) {
        return Gate::kCalledOff;  // a compile error comes back without waiting for the ranks
      }
      events_.Emit(
          v1::VERIFYING,
          absl::StrFormat("compiled in %.2f s; %d trials on %d rank process(es)",
                          outcome_.compiled->report.seconds(), run_.trials(), run_.world_size()));
      return Gate::kOpen;
    };
    hooks.before_cleanup = [this] { JoinCompile(); };
  }
  // Rank 0's stdout is shared with the submission: ParseProgress drops what the harness never
  // writes, so a forged line can at most announce a trial early (the verdict comes from
  // reports).
  hooks.on_progress = [this](const std::string& line) -> std::string {
    std::optional<Progress> p = ParseProgress(line, run_.trials());
    if (!p) return "";
    if (p->trial >= 0) {
      events_.Emit(v1::VERIFYING,
                   absl::StrCat("trial ", p->trial + 1, "/", run_.trials(),
                                p->ok ? " correct on every rank" : " failed"),
                   p->trial, p->ok);
    } else if (p->benchmarking) {
      events_.Emit(
          v1::BENCHMARKING,
          absl::StrCat("timing candidate and baseline: ", run_.warmup(), " warm-up + ",
                       run_.iters(), " timed iterations",
                       run_.min_window_ms() > 0 ? absl::StrCat(" or more, windows of at least ",
                                                               run_.min_window_ms(), " ms")
                                                : ""));
      return AwaitQuiet();
    }
    return "";
  };
  hooks.settled = [this](const LaunchResult& so_far) { return SettleEarly(so_far); };
  if (standby_ && !standby_->Adopt(hooks)) {
    // They ended on their own since OpenScratch (a rank failed to start): ranks of our own.
    standby_->Discard();
    (void)standby_->Wait();
    standby_ = nullptr;
  }
  // One evaluation at a time on a node's GPUs (gpu_lock.h), held until the verdict is out
  // (~Evaluation). Standby ranks that set up their devices early hold it already; others touch
  // no GPU before the job's spec is written, below.
  if (backend_ == "cuda" && !o_.gpus_held && !(standby_ && standby_->holds_gpus())) {
    absl::StatusOr<GpuLock> opened = GpuLock::Open(o_.cache_dir, o_.gpus);
    if (!opened.ok()) return End(v1::INTERNAL, std::string(opened.status().message()));
    gpus_ = *std::move(opened);
    bool told = false;
    for (;;) {
      absl::StatusOr<bool> held = gpus_.TryLock();
      if (!held.ok()) return End(v1::INTERNAL, std::string(held.status().message()));
      if (*held) break;
      if (!told) {
        events_.Emit(v1::VERIFYING,
                     "waiting for this node's GPUs: another evaluation runs on them");
        told = true;
      }
      // A compile that fails meanwhile ends the wait: its verdict needs no GPU (Run adopts it).
      if (gated && CompileFailed()) return End(v1::INTERNAL, "not run: the compile failed");
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
  std::unique_ptr<RankLaunch> launch;
  if (!standby_) {
    absl::StatusOr<std::unique_ptr<RankLaunch>> built = BuildRankLaunch(
        o_, sandboxed_ ? &sandbox_ : nullptr, run_.world_size(), launch_backend_, scratch_,
        gated ? CandidateLibrary() : library_path_, gated, /*await_spec=*/false);
    if (!built.ok()) return End(v1::INTERNAL, std::string(built.status().message()));
    launch = *std::move(built);
  }
  // Each rank's harness gets a key to sign its report with, in a file it reads and deletes
  // before the submission's process starts (verdict.h); then the job's spec (spec.proto), which
  // standby ranks wait for.
  report_base_ = scratch_ + "/report";
  for (int rank = 0; rank < run_.world_size(); ++rank) {
    report_keys_.push_back(MakeReportKey());
    absl::Status written = WriteReportKey(absl::StrCat(report_base_, ".key.", rank),
                                          report_keys_.back(), sandboxed_ ? &sandbox_ : nullptr);
    if (!written.ok()) return End(v1::INTERNAL, std::string(written.message()));
  }
  spec_written_ = absl::Now();  // before: a standby rank may read it as soon as it is there
  if (absl::Status written = WriteSpecFile(scratch_ + "/spec.binpb", run_); !written.ok()) {
    return End(v1::INTERNAL, std::string(written.message()));
  }
  run_timeout_ = hooks.timeout;
  gated_ = gated;
  spec_out_.store(true, std::memory_order_release);
  if (standby_) {
    events_.Emit(
        gated ? v1::COMPILING : v1::VERIFYING,
        absl::StrFormat("%d rank process(es) started %.2f s ahead of this job%s", run_.world_size(),
                        absl::ToDoubleSeconds(absl::Now() - standby_->started()),
                        gated ? ", waiting for the compile" : ""));
  } else if (gated) {
    events_.Emit(v1::COMPILING, absl::StrCat("starting ", run_.world_size(),
                                             " rank process(es) while the source compiles"));
  } else {
    events_.Emit(v1::VERIFYING, absl::StrCat("starting ", run_.world_size(), " rank process(es), ",
                                             run_.trials(), " trials"));
  }
  absl::StatusOr<LaunchResult> launched;
  if (standby_) {
    launched = standby_->Wait();
    standby_waited_ = true;
  } else {
    launch->spec.timeout = hooks.timeout;
    launch->spec.gate = hooks.gate;
    launch->spec.on_progress = hooks.on_progress;
    launch->spec.before_cleanup = hooks.before_cleanup;
    launch->spec.settled = hooks.settled;
    launched = RankLauncher().Run(launch->spec);
  }
  if (early_) {
    // The verdict is out (SettleEarly) and stands; the ranks have ended now, and how is the
    // node's concern (a rank that died or hung after its report may have left the GPU unwell).
    if (!launched.ok()) {
      after_verdict_ = std::string(launched.status().message());
    } else if (launched->timed_out) {
      after_verdict_ =
          absl::StrCat("the rank processes did not end within ", absl::FormatDuration(run_timeout_),
                       " after their reports and were killed");
    } else if (launched->first_failed >= 0 && early_->status() != v1::RUNTIME_ERROR) {
      // (A rank whose candidate failed leaves at once, and its peers are ended after it: that is
      // the verdict's own way.)
      after_verdict_ =
          absl::StrCat("rank process ", launched->first_failed, " ",
                       launched->Describe(launched->first_failed), " after its report");
    }
    return std::nullopt;
  }
  ranks_ended_ = absl::Now();
  if (!launched.ok()) return End(v1::INTERNAL, std::string(launched.status().message()));
  launched_ = std::move(*launched);
  NoteLaunch();
  return std::nullopt;
}

void Evaluation::NoteLaunch() {
  // Standby ranks ran before this job began: their times count from its start.
  const absl::Duration ahead = standby_
                                   ? std::max(absl::ZeroDuration(), start_ - standby_->started())
                                   : absl::ZeroDuration();
  if (standby_) (*r_.mutable_stage_seconds())["ranks_ahead_of_job"] = absl::ToDoubleSeconds(ahead);
  (*r_.mutable_stage_seconds())["run"] = absl::ToDoubleSeconds(launched_.elapsed - ahead);
  // The job's own steps before its ranks could read it (its checks, the job folder, the sandbox
  // probe or the standby's adoption, a compile that is not gated, the GPU lock, the report keys):
  // part of "run" for standby ranks.
  (*r_.mutable_stage_seconds())["job_before_spec"] = absl::ToDoubleSeconds(spec_written_ - start_);
  if (gated_ && launched_.before_gate >= absl::ZeroDuration()) {
    // The part of "run" that the compile hid: the ranks' start while it ran.
    (*r_.mutable_stage_seconds())["ranks_during_compile"] =
        absl::ToDoubleSeconds(std::max(absl::ZeroDuration(), launched_.before_gate - ahead));
  }
}

std::string Evaluation::AwaitQuiet() {
  if (!quiet_) return "";
  const std::string go = report_keys_.empty() ? "" : GoWord(report_keys_[0]);
  if (quiet_asked_) return go;
  quiet_asked_ = true;
  const absl::Time t0 = absl::Now();
  const std::optional<int> beside = quiet_->Await(kQuietWait);
  worker_beside_ = beside.value_or(-1);
  r_.set_compiles_beside(worker_beside_);
  (*r_.mutable_stage_seconds())["quiet_word"] = absl::ToDoubleSeconds(absl::Now() - t0);
  if (!beside) {
    events_.Emit(v1::BENCHMARKING,
                 absl::StrCat("the worker did not say within ", absl::FormatDuration(kQuietWait),
                              " that its other work is stopped; timing all the same (this "
                              "job's reference does not join the node's baseline)"));
  }
  return go;
}

bool Evaluation::TimedAlone(const std::vector<const v1::RankReport*>& reports) {
  // Compiles anywhere on the node: the worker's, another worker's, a pkb-eval's started by hand.
  // Counted once, when every report is in (the timing is over): SettleEarly's call, or Judge's.
  if (!node_beside_) {
    std::string unread;
    node_beside_ =
        NodeCompiles(o_.cache_dir + "/compiles").RanBeside(node_mark_, OwnCompileKey(), &unread);
    if (!unread.empty()) {
      events_.Emit(v1::BENCHMARKING,
                   absl::StrCat("the node's running compiles could not be read (", unread,
                                "): this job's reference stays out of the node's baseline"));
    }
  }
  compiles_beside_ = std::max(worker_beside_, *node_beside_);
  if (!o_.quiet_from.empty()) {
    bool heard = false;
    for (const v1::RankReport* rep : reports) heard |= rep->rank() == 0 && rep->quiet_word_heard();
    // Timed without the word (the engine never saw rank 0 say it would time, say).
    if (!heard || worker_beside_ == -1) compiles_beside_ = -1;
  }
  r_.set_compiles_beside(compiles_beside_);
  return compiles_beside_ == 0;
}

bool Evaluation::SettleEarly(const LaunchResult& so_far) {
  if (!spec_out_.load(std::memory_order_acquire)) return false;
  // Every report there (each is renamed into place whole), and not the same files as last time.
  std::vector<std::array<int64_t, 3>> files;
  for (int rank = 0; rank < run_.world_size(); ++rank) {
    struct stat st;
    if (lstat(absl::StrCat(report_base_, ".", rank).c_str(), &st) != 0) return false;
    // What is not a report as the judges write it waits for the end; so does what would be
    // expensive to read again and again while the ranks still time (a submission's plant).
    if (!S_ISREG(st.st_mode) || st.st_size > kMaxEarlyReportBytes) return false;
    files.push_back({static_cast<int64_t>(st.st_ino), static_cast<int64_t>(st.st_size),
                     st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec});
  }
  if (files == reports_tried_) return false;
  reports_tried_ = files;
  ParsedReports parsed = ReadReports();
  // Anything else (a report missing, malformed or forged) waits for the ranks' end, as before.
  if (!parsed.Complete() || !parsed.malformed.empty()) return false;
  if (o_.baseline && !o_.baseline_only && o_.settle_baseline > 0 && !run_.functional()) {
    absl::StatusOr<std::vector<double>> recent =
        BaselineStore(o_.cache_dir + "/baselines", o_.baseline_max_age)
            .Recent(BaselineKeyFor(parsed.reports[0]->device_name()));
    std::vector<const v1::RankReport*> reports;
    for (const auto& rep : parsed.reports) reports.push_back(&*rep);
    const int joins = TimedAlone(reports) ? 1 : 0;  // this job's own (Judge)
    // Without the worker's word nothing is settled (Judge), so nothing to wait for.
    const bool thin = !recent.ok() || static_cast<int>(recent->size()) + joins < o_.settle_baseline;
    if (thin && compiles_beside_ != -1) return false;
  }
  if (gated_) {
    // The gate opened, so the compile is over and gave the library the ranks loaded.
    JoinCompile();
    if (AdoptCompile(outcome_)) return false;
  }
  launched_ = so_far;
  NoteLaunch();
  early_ = Finish(Judge(std::move(parsed), /*early=*/true));
  return true;
}

ParsedReports Evaluation::ReadReports() const {
  std::vector<std::optional<std::string>> blobs(run_.world_size());
  std::vector<std::string> unreadable;
  for (int rank = 0; rank < run_.world_size(); ++rank) {
    absl::StatusOr<std::string> bytes = ReadReportFile(absl::StrCat(report_base_, ".", rank));
    if (bytes.ok()) {
      blobs[rank] = std::move(*bytes);
    } else if (!absl::IsNotFound(bytes.status())) {
      unreadable.push_back(absl::StrCat("rank ", rank, "'s report: ", bytes.status().message()));
    }
  }
  ParsedReports parsed = ParseRankReports(MakeVerdictContext(), blobs);
  parsed.malformed.insert(parsed.malformed.end(), unreadable.begin(), unreadable.end());
  return parsed;
}

std::string Evaluation::BaselineKeyFor(const std::string& gpu) const {
  return BaselineKey(run_.problem_id(), p_->info().version, run_.world_size(), run_.m(), run_.n(),
                     run_.dtype(), run_.iters(), run_.min_window_ms(), gpu, HarnessVersion());
}

std::string Evaluation::LogTail(int rank) const {
  size_t idx = under_mpirun_ ? 0 : static_cast<size_t>(rank);
  return idx < launched_.ranks.size() ? TailOfFile(launched_.ranks[idx].log_path, 8192)
                                      : std::string();
}

VerdictContext Evaluation::MakeVerdictContext() const {
  VerdictContext vctx;
  vctx.world = run_.world_size();
  vctx.trials = run_.trials();
  vctx.iters = run_.iters();
  vctx.max_iters = TimedIterationsCap(run_);
  vctx.baseline = o_.baseline;
  vctx.baseline_only = o_.baseline_only;
  vctx.candidate_rounds = CandidateRounds(run_.functional());
  vctx.cuda = backend_ == "cuda" && !run_.functional();  // the physical floor: not shared GPUs
  Roofline roof = p_->GetRoofline(*cfg_);
  vctx.nvlink_bytes = roof.nvlink_bytes;
  vctx.hbm_bytes = roof.hbm_bytes;
  vctx.flops = roof.flops;
  vctx.collective_bytes = roof.collective_bytes;
  vctx.busbw_factor = roof.busbw_factor;
  vctx.report_keys = report_keys_;
  return vctx;
}

Verdict Evaluation::Judge(ParsedReports parsed, bool early) {
  const VerdictContext vctx = MakeVerdictContext();
  const int first_failed = launched_.first_failed;
  auto first_log_tail = [&] { return LogTail(first_failed >= 0 ? first_failed : 0); };
  if (launched_.timed_out) {
    r_.set_failed_rank_log(first_log_tail());
    return End(v1::TIMEOUT, absl::StrCat("the ranks did not finish within ",
                                         absl::FormatDuration(run_timeout_), " and were killed"));
  }
  CollectRankTrials(parsed, &r_);
  if (first_failed < 0 && !parsed.malformed.empty()) {
    // Every rank exited cleanly, yet a report is not one the harness writes: the submission
    // wrote to the verdict channel.
    r_.set_failed_rank_log(first_log_tail());
    return End(v1::REJECTED,
               absl::StrCat("tampered verdict channel: ", absl::StrJoin(parsed.malformed, "; ")));
  }
  if (!parsed.Complete() && gated_ && launched_.before_gate < absl::ZeroDuration()) {
    // Their gate never opened: nothing of the submission was loaded, the failure is ours.
    r_.set_failed_rank_log(first_log_tail());
    return End(v1::INTERNAL, absl::StrCat("a rank process ended before the candidate was "
                                          "loaded (",
                                          launched_.Describe(first_failed >= 0 ? first_failed : 0),
                                          "); nothing of the submission ran"));
  }
  if (!parsed.Complete()) {
    r_.set_failed_rank_log(first_log_tail());
    std::string who = first_failed >= 0 ? absl::StrCat("rank process ", first_failed, " ",
                                                       launched_.Describe(first_failed))
                                        : "a rank process ended without a report";
    if (under_mpirun_) who = absl::StrCat("a rank process failed (", launched_.Describe(0), ")");
    // A rank whose candidate failed says how in its report; the others were ended after it.
    for (const auto& rep : parsed.reports) {
      if (rep && rep->status() == v1::RUNTIME_ERROR) {
        r_.set_failed_rank_log(LogTail(rep->rank()));
        return End(v1::RUNTIME_ERROR, rep->message());
      }
    }
    return End(v1::RUNTIME_ERROR, absl::StrCat(who, "; the candidate crashed or faulted"));
  }
  std::vector<v1::RankReport> reports;
  for (auto& rep : parsed.reports) reports.push_back(std::move(*rep));
  Verdict v = JudgeReports(vctx, reports, &r_);
  NoteRankEnds(reports, spec_written_, ranks_ended_, &r_);
  if (v.log_rank >= 0) r_.set_failed_rank_log(LogTail(v.log_rank));
  if (run_.functional() && v.status == v1::OK) {
    v.message = absl::StrFormat(
        "functional run: correct on %d rank(s) in %d trial(s)%s; no speedup (its timings are "
        "not comparable)",
        run_.world_size(), run_.trials(),
        r_.gpus_used() > 0 ? absl::StrFormat(", sharing %d GPU(s)", r_.gpus_used()) : "");
  }
  if (v.status == v1::OK && o_.baseline && r_.baseline().wall_per_iter_us() > 0) {
    // The node's baseline: this job's measurement joins its newest ones (baseline_store.h), unless
    // a compile ran on the node beside the job, or it was timed without the worker's word: that
    // may have left the node slower than it is for a job alone.
    std::vector<const v1::RankReport*> rank_reports;
    for (const auto& rep : reports) rank_reports.push_back(&rep);
    const bool alone = TimedAlone(rank_reports);
    BaselineStore store(o_.cache_dir + "/baselines", o_.baseline_max_age);
    const std::string key = BaselineKeyFor(r_.gpu());
    absl::StatusOr<std::vector<double>> recent =
        alone ? store.Record(key, r_.baseline().wall_per_iter_us()) : store.Recent(key);
    if (recent.ok() && !o_.baseline_only) {
      const int have = static_cast<int>(recent->size());
      // Not while the ranks still end (SettleEarly checked the store; it changed since): the
      // measurements there are, as when the settling stops. Nor where the worker never said its
      // compiles were stopped (they may run still).
      if (have < o_.settle_baseline && !early && compiles_beside_ != -1) {
        // A thin baseline (a node's first jobs of this shape): settled first (engine.h).
        events_.Emit(
            v1::BENCHMARKING,
            absl::StrCat("settling this node's baseline: ", have, " of ", o_.settle_baseline,
                         " measurements of this reference; timing it again in fresh "
                         "processes"));
        const absl::Time t0 = absl::Now();
        EvalOptions settle = o_;
        settle.spec = run_;
        settle.gpus_held = backend_ == "cuda";
        std::string failure;
        SettleNodeBaseline(settle, o_.settle_baseline - have, &failure);
        (*r_.mutable_stage_seconds())["baseline_settle"] = absl::ToDoubleSeconds(absl::Now() - t0);
        if (!failure.empty()) {
          events_.Emit(v1::BENCHMARKING,
                       absl::StrCat("settling the baseline stopped (the speedup uses the "
                                    "measurements there are): ",
                                    failure));
        }
        if (absl::StatusOr<std::vector<double>> now = store.Recent(key); now.ok()) recent = now;
      }
      ApplyNodeBaseline(*recent, &r_);
      v.message = absl::StrFormat("correct on %d rank(s) in %d trial(s); speedup %.3fx",
                                  run_.world_size(), run_.trials(), r_.speedup());
      if (!alone && recent->empty()) {
        // Nothing better to score against: said so, where the score is read.
        absl::StrAppend(&v.message,
                        " against this job's own reference, timed after compiles ran on the "
                        "node beside the job (this node has no measurement of it alone)");
      }
    }
  }
  return v;
}

}  // namespace pkb
