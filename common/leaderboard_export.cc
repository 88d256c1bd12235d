#include "common/leaderboard_export.h"

#include <google/protobuf/util/json_util.h>

#include <charconv>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"

namespace pkb {
namespace {

// Shortest text that reads back as the same double.
std::string Num(double v) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : absl::StrCat(v);
}

void Row(std::string* out, const std::vector<std::string>& fields) {
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i) out->push_back(',');
    out->append(CsvField(fields[i]));
  }
  out->push_back('\n');
}

// A result's shapes, `;`-joined: "1024x1024=1.5;512x2048=1.25;1536x1024=PENDING" (a run not
// OK: its status; PENDING while it runs; MISSING when the store has not got it). Empty for a
// result without shape runs.
std::string Shapes(const v1::Confirmation& c) {
  std::vector<std::string> parts;
  for (const v1::ShapeFigure& f : c.shapes()) {
    std::string figure = f.stage() == v1::STAGE_UNSPECIFIED ? "MISSING"
                         : f.stage() != v1::DONE            ? "PENDING"
                         : f.status() != v1::OK             ? v1::Status_Name(f.status())
                                                            : Num(f.speedup());
    parts.push_back(absl::StrCat(f.m(), "x", f.n(), "=", figure));
  }
  return absl::StrJoin(parts, ";");
}

std::string Tags(const google::protobuf::RepeatedPtrField<std::string>& tags) {
  return absl::StrJoin(tags, ";");
}

}  // namespace

std::string CsvField(const std::string& value) {
  if (value.find_first_of(",\"\n\r") == std::string::npos) return value;
  std::string out = "\"";
  for (char c : value) {
    if (c == '"') out.push_back('"');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

std::string IsoTime(int64_t unix_micros) {
  if (unix_micros == 0) return "";
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", absl::FromUnixMicros(unix_micros),
                          absl::UTCTimeZone());
}

std::string ToJson(const google::protobuf::Message& message, bool pretty, bool include_defaults) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = pretty;
  o.always_print_primitive_fields = include_defaults;
  (void)google::protobuf::util::MessageToJsonString(message, &out, o);
  return out;
}

std::string LeaderboardCsv(const v1::LeaderboardAnswer& answer) {
  std::string out;
  Row(&out, {"problem_id",
             "problem_slug",
             "world_size",
             "dtype",
             "gpu_class",
             "rank",
             "submitter",
             "model",
             "agent",
             "speedup",
             "candidate_median_us",
             "baseline_median_us",
             "gpu",
             "ranked",
             "results",
             "tags",
             "job_id",
             "finished_utc",
             "confirmation",
             "first_speedup",
             "confirmation_speedup",
             "confirmation_job_id",
             "shapes"});
  // Ranked entries, then pending ones (rank 0, confirmation CONFIRMATION_PENDING).
  for (const v1::Board& b : answer.boards()) {
    for (const auto* entries : {&b.entries(), &b.pending()}) {
      for (const v1::LeaderboardEntry& e : *entries) {
        const v1::Confirmation& c = e.confirmation();
        Row(&out, {absl::StrCat(e.problem_id()),
                   e.problem_slug(),
                   absl::StrCat(e.world_size()),
                   e.dtype(),
                   e.gpu_class(),
                   absl::StrCat(e.rank()),
                   e.submitter(),
                   e.model(),
                   e.agent(),
                   Num(e.speedup()),
                   Num(e.candidate_median_us()),
                   Num(e.baseline_median_us()),
                   e.gpu(),
                   e.ranked() ? "true" : "false",
                   absl::StrCat(e.results()),
                   Tags(e.tags()),
                   e.job_id(),
                   IsoTime(e.finished_unix_micros()),
                   v1::ConfirmationState_Name(c.state()),
                   Num(c.first_speedup()),
                   Num(c.confirmation_speedup()),
                   c.job_id(),
                   Shapes(c)});
      }
    }
  }
  return out;
}

std::string SuiteCsv(const v1::SuiteAnswer& answer) {
  std::string out;
  std::vector<std::string> header = {"model", "tasks", "tasks_correct", "geomean_speedup"};
  if (answer.models_size() > 0) {
    for (const v1::FastP& f : answer.models(0).fast_p())
      header.push_back(absl::StrCat("fast_", Num(f.p())));
  }
  Row(&out, header);
  for (const v1::ModelScore& m : answer.models()) {
    std::vector<std::string> row = {m.model(), absl::StrCat(m.tasks()),
                                    absl::StrCat(m.tasks_correct()), Num(m.geomean_speedup())};
    for (const v1::FastP& f : m.fast_p()) row.push_back(Num(f.fast_p()));
    Row(&out, row);
  }
  return out;
}

std::string SubmissionsCsv(const v1::ListSubmissionsAnswer& answer) {
  std::string out;
  Row(&out, {"job_id",
             "problem_id",
             "problem_slug",
             "world_size",
             "dtype",
             "gpu_class",
             "stage",
             "status",
             "speedup",
             "candidate_median_us",
             "baseline_median_us",
             "submitter",
             "model",
             "agent",
             "tags",
             "ranked",
             "cached",
             "created_utc",
             "finished_utc",
             "total_seconds",
             "source_sha256",
             "message"});
  for (const v1::SubmissionSummary& s : answer.submissions()) {
    Row(&out, {s.job_id(),
               absl::StrCat(s.problem_id()),
               s.problem_slug(),
               absl::StrCat(s.world_size()),
               s.dtype(),
               s.gpu_class(),
               v1::Stage_Name(s.stage()),
               s.stage() == v1::DONE ? v1::Status_Name(s.status()) : "",
               Num(s.speedup()),
               Num(s.candidate_median_us()),
               Num(s.baseline_median_us()),
               s.submitter(),
               s.model(),
               s.agent(),
               Tags(s.tags()),
               s.ranked() ? "true" : "false",
               s.cached() ? "true" : "false",
               IsoTime(s.created_unix_micros()),
               IsoTime(s.finished_unix_micros()),
               Num(s.total_seconds()),
               s.source_sha256(),
               s.message()});
  }
  return out;
}

std::string SubmissionCsv(const v1::Submission& submission) {
  std::string out;
  Row(&out, {"job_id", "sequence", "time_utc", "stage", "attempt", "trial", "trial_ok", "message",
             "status", "speedup", "candidate_median_us", "baseline_median_us"});
  for (const v1::EvalEvent& e : submission.events()) {
    bool done = e.stage() == v1::DONE;
    const v1::EvalResult& r = e.result();
    Row(&out,
        {submission.job().job_id(), absl::StrCat(e.sequence()), IsoTime(e.unix_micros()),
         v1::Stage_Name(e.stage()), absl::StrCat(e.attempt()),
         e.stage() == v1::VERIFYING ? absl::StrCat(e.trial()) : "",
         e.stage() == v1::VERIFYING ? (e.trial_ok() ? "true" : "false") : "", e.message(),
         done ? v1::Status_Name(r.status()) : "", done ? Num(r.speedup()) : "",
         done ? Num(r.candidate().median_us()) : "", done ? Num(r.baseline().median_us()) : ""});
  }
  return out;
}

}  // namespace pkb
