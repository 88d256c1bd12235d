#include "server/public_submission.h"

#include "absl/strings/str_cat.h"
#include "worker/engine/profiler.h"

namespace pkb {
namespace {

// The engine's stage_seconds keys (worker/engine/engine.cc, verdict.cc). The map's keys are text
// a worker sends, so only these known names pass.
constexpr const char* kStageNames[] = {"compile", "run", "verify", "benchmark"};

// Said of a verdict when the result names no failing rank.
const char* Explanation(v1::Status status) {
  switch (status) {
    case v1::OK:
      return "correct on every rank in every trial";
    case v1::COMPILE_ERROR:
      return "the source did not compile";
    case v1::RUNTIME_ERROR:
      return "the candidate failed to run";
    case v1::MISMATCH:
      return "an output differs from the reference";
    case v1::TIMEOUT:
      return "a stage ran past its time limit";
    case v1::REJECTED:
      return "the source breaks a rule of the harness";
    case v1::WORKER_LOST:
      return "the workers running it were lost too many times";
    case v1::INTERNAL:
      return "a fault of the service";
    case v1::NO_DEVICE:
      return "compiled; the worker has no GPU to run it on";
    case v1::CANCELLED:
      return "cancelled";
    default:
      return "no verdict";
  }
}

v1::Timing PublicTiming(const v1::Timing& t) {
  v1::Timing p;
  p.set_median_us(t.median_us());
  p.set_mean_us(t.mean_us());
  p.set_stddev_us(t.stddev_us());
  p.set_p10_us(t.p10_us());
  p.set_p90_us(t.p90_us());
  p.set_min_us(t.min_us());
  p.set_max_us(t.max_us());
  p.set_samples(t.samples());
  *p.mutable_per_rank_median_us() = t.per_rank_median_us();
  p.set_wall_per_iter_us(t.wall_per_iter_us());
  p.set_input_sets(t.input_sets());
  p.set_spot_checks(t.spot_checks());
  *p.mutable_round_wall_per_iter_us() = t.round_wall_per_iter_us();
  return p;
}

v1::Roofline PublicRoofline(const v1::Roofline& r) {
  v1::Roofline p;
  p.set_nvlink_bytes(r.nvlink_bytes());
  p.set_hbm_bytes(r.hbm_bytes());
  p.set_flops(r.flops());
  p.set_algbw_gbps(r.algbw_gbps());
  p.set_busbw_gbps(r.busbw_gbps());
  p.set_percent_of_roofline(r.percent_of_roofline());
  p.set_floor_us(r.floor_us());
  return p;
}

// `problem` (why an output was not compared) is the judge's text about the candidate's tensors;
// the public view says only that it was not compared.
v1::OutputCheck PublicOutputCheck(const v1::OutputCheck& o) {
  v1::OutputCheck p;
  p.set_index(o.index());
  p.set_name(o.name());  // the problem's output name, from the reference's spec
  p.set_ok(o.ok());
  if (!o.problem().empty()) p.set_problem("not compared");
  p.set_max_abs_error(o.max_abs_error());
  p.set_max_rel_error(o.max_rel_error());
  p.set_bad_count(o.bad_count());
  p.set_first_bad_index(o.first_bad_index());
  p.set_nan_count(o.nan_count());
  p.set_unwritten_count(o.unwritten_count());
  p.set_numel(o.numel());
  p.set_atol(o.atol());
  p.set_rtol(o.rtol());
  p.set_expected_at_first_bad(o.expected_at_first_bad());
  p.set_actual_at_first_bad(o.actual_at_first_bad());
  return p;
}

v1::RankTrial PublicRankTrial(const v1::RankTrial& t) {
  v1::RankTrial p;
  p.set_rank(t.rank());
  p.set_trial(t.trial());
  p.set_ok(t.ok());
  for (const v1::OutputCheck& o : t.outputs()) *p.add_outputs() = PublicOutputCheck(o);
  return p;
}

v1::SubmitRequest PublicRequest(const v1::SubmitRequest& r) {
  v1::SubmitRequest p;
  // The spec's allow-list: its numbers and flags, and the two strings the coordinator checked
  // against its own lists (dtype, gpu_class).
  const v1::EvalSpec& in = r.spec();
  v1::EvalSpec* out = p.mutable_spec();
  out->set_problem_id(in.problem_id());
  out->set_world_size(in.world_size());
  out->set_dtype(in.dtype());
  out->set_m(in.m());
  out->set_n(in.n());
  out->set_gpu_class(in.gpu_class());
  if (in.has_trials()) out->set_trials(in.trials());
  if (in.has_warmup()) out->set_warmup(in.warmup());
  if (in.has_iters()) out->set_iters(in.iters());
  out->set_ranked(in.ranked());
  out->set_practice(in.practice());
  out->set_functional(in.functional());
  p.set_problem_id(r.problem_id());
  p.set_world_size(r.world_size());
  p.set_dtype(r.dtype());
  p.set_m(r.m());
  p.set_n(r.n());
  p.set_trials(r.trials());
  p.set_warmup(r.warmup());
  p.set_iters(r.iters());
  p.set_gpu_class(r.gpu_class());
  p.set_no_cache(r.no_cache());
  // The submitter's metadata is public by design (the leaderboard shows it).
  p.set_submitter(r.submitter());
  p.set_model(r.model());
  p.set_agent(r.agent());
  *p.mutable_tags() = r.tags();
  p.set_ranked(r.ranked());
  p.set_practice(r.practice());
  return p;
}

}  // namespace

std::string PublicVerdictMessage(const v1::EvalResult& result) {
  const v1::Status status = result.status();
  const std::string name = v1::Status_IsValid(status) ? v1::Status_Name(status) : "UNKNOWN";
  // The verdicts a rank reaches; the rank and trial say where without saying what.
  if (status == v1::RUNTIME_ERROR || status == v1::MISMATCH || status == v1::TIMEOUT ||
      status == v1::REJECTED) {
    for (const v1::RankTrial& t : result.rank_trials()) {
      if (!t.ok()) return absl::StrCat(name, " on rank ", t.rank(), ", trial ", t.trial());
    }
  }
  return absl::StrCat(name, ": ", Explanation(status));
}

// A profile as anyone may see it. The candidate's side is its process's own account: its kernels
// are numbered, not named (their names are the source's), its copies named from a fixed list, its
// note dropped; times, launch shapes and bytes stay. The reference's is the judge's (the
// problem's own kernels), its note dropped all the same.
v1::RankProfile PublicProfile(const v1::RankProfile& in) {
  v1::RankProfile p = in;
  int kernel = 0;
  for (v1::ProfileRecord& rec : *p.mutable_candidate()->mutable_records()) {
    if (rec.kind() == v1::ProfileRecord::KERNEL) {
      rec.set_name(absl::StrCat("kernel ", ++kernel));
    } else if (!IsTransferName(rec.name())) {
      rec.set_name(TransferName(rec.kind() == v1::ProfileRecord::MEMSET ? Transfer::kMemset
                                                                        : Transfer::kOtherCopy));
    }
  }
  p.mutable_candidate()->clear_note();
  p.mutable_reference()->clear_note();
  return p;
}

v1::EvalResult PublicResult(const v1::EvalResult& r) {
  v1::EvalResult p;
  p.set_status(r.status());
  p.set_message(PublicVerdictMessage(r));
  p.set_problem_id(r.problem_id());
  p.set_problem_slug(r.problem_slug());
  p.set_world_size(r.world_size());
  p.set_dtype(r.dtype());
  p.set_m(r.m());
  p.set_n(r.n());
  p.set_gpu(r.gpu());  // the device's name as the judge reads it
  p.set_harness_version(r.harness_version());
  if (r.has_compile()) {
    v1::CompileReport* c = p.mutable_compile();
    c->set_ok(r.compile().ok());
    c->set_cache_hit(r.compile().cache_hit());
    c->set_seconds(r.compile().seconds());
  }
  p.set_trials(r.trials());
  for (const v1::RankTrial& t : r.rank_trials()) *p.add_rank_trials() = PublicRankTrial(t);
  if (r.has_candidate()) *p.mutable_candidate() = PublicTiming(r.candidate());
  if (r.has_baseline()) *p.mutable_baseline() = PublicTiming(r.baseline());
  p.set_speedup(r.speedup());
  p.set_speedup_low(r.speedup_low());
  p.set_speedup_high(r.speedup_high());
  p.set_speedup_events(r.speedup_events());
  p.set_speedup_in_job(r.speedup_in_job());
  p.set_baseline_node_us(r.baseline_node_us());
  p.set_baseline_node_samples(r.baseline_node_samples());
  p.set_voided_status(r.voided_status());
  p.set_confirmation_job_id(r.confirmation_job_id());
  p.set_confirms_job_id(r.confirms_job_id());
  *p.mutable_shape_job_ids() = r.shape_job_ids();
  p.set_shape_run(r.shape_run());
  if (r.has_roofline()) *p.mutable_roofline() = PublicRoofline(r.roofline());
  for (const v1::RankProfile& rp : r.profiles()) *p.add_profiles() = PublicProfile(rp);
  p.set_cached(r.cached());
  p.set_total_seconds(r.total_seconds());
  for (const char* stage : kStageNames) {
    auto it = r.stage_seconds().find(stage);
    if (it != r.stage_seconds().end()) (*p.mutable_stage_seconds())[stage] = it->second;
  }
  return p;
}

v1::EvalEvent PublicEvent(const v1::EvalEvent& e) {
  v1::EvalEvent p;
  p.set_job_id(e.job_id());
  p.set_sequence(e.sequence());
  p.set_stage(e.stage());
  p.set_trial(e.trial());
  p.set_trial_ok(e.trial_ok());
  p.set_unix_micros(e.unix_micros());
  p.set_attempt(e.attempt());
  switch (e.stage()) {
    case v1::QUEUED:
      p.set_message("queued");
      break;
    case v1::COMPILING:
      p.set_message("compiling");
      break;
    case v1::VERIFYING:
      p.set_message(e.trial() >= 0
                        ? absl::StrCat("trial ", e.trial(), e.trial_ok() ? " ok" : " failed")
                        : "verifying");
      break;
    case v1::BENCHMARKING:
      p.set_message("benchmarking");
      break;
    case v1::DONE:
      p.set_message(PublicVerdictMessage(e.result()));
      break;
    default:
      break;
  }
  if (e.has_result()) *p.mutable_result() = PublicResult(e.result());
  return p;
}

v1::Job PublicJob(const v1::Job& job) {
  v1::Job p;
  p.set_job_id(job.job_id());
  *p.mutable_request() = PublicRequest(job.request());
  p.set_problem_version(job.problem_version());
  p.set_harness_version(job.harness_version());
  p.set_stage(job.stage());
  p.set_attempts(job.attempts());
  if (job.has_result()) *p.mutable_result() = PublicResult(job.result());
  p.set_created_unix_micros(job.created_unix_micros());
  p.set_updated_unix_micros(job.updated_unix_micros());
  p.set_cached_from_job_id(job.cached_from_job_id());
  p.set_gpu_class(job.gpu_class());
  p.set_confirms_job_id(job.confirms_job_id());
  p.set_confirmation_job_id(job.confirmation_job_id());
  *p.mutable_shape_job_ids() = job.shape_job_ids();
  p.set_shape_run(job.shape_run());
  return p;
}

v1::Submission PublicSubmission(const v1::Submission& s) {
  v1::Submission p;
  *p.mutable_job() = PublicJob(s.job());
  for (const v1::EvalEvent& e : s.events()) *p.add_events() = PublicEvent(e);
  p.set_ranks(s.ranks());
  // Written by the coordinator from the verdict's name and job ids (NotRankedReason).
  p.set_not_ranked_reason(s.not_ranked_reason());
  // Figures, states, shapes and job ids; its reason is made of job ids, shapes and a verdict's
  // name only (ConfirmationOf).
  *p.mutable_confirmation() = s.confirmation();
  return p;
}

}  // namespace pkb
