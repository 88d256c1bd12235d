#include "common/eval_spec.h"

#include <google/protobuf/text_format.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/hash.h"

namespace pkb {

void ApplyDefaults(v1::EvalSpec* s, const v1::ProblemSpec* problem) {
  // The engine's own shape, for a problem whose catalog entry states none.
  const int64_t default_m = problem && problem->default_m() > 0 ? problem->default_m() : 1024;
  const int64_t default_n = problem && problem->default_n() > 0 ? problem->default_n() : 1024;
  const std::string default_dtype =
      problem && !problem->default_dtype().empty() ? problem->default_dtype() : "bfloat16";
  s->set_dtype(s->dtype().empty() ? default_dtype : CanonicalDtype(s->dtype()));
  if (s->m() == 0) s->set_m(default_m);
  if (s->n() == 0) s->set_n(default_n);
  if (s->language().empty()) s->set_language("cuda");
  // A host-only candidate runs on GPU-less workers only.
  if (s->gpu_class().empty()) s->set_gpu_class(s->language() == "cpp" ? "cpu" : "any");
  if (!s->has_trials()) s->set_trials(5);
  if (!s->has_warmup()) s->set_warmup(500);
  if (!s->has_iters()) s->set_iters(100);
  if (!s->has_max_sets()) s->set_max_sets(10000);
  if (!s->has_l2_multiple()) s->set_l2_multiple(3.0);
  if (!s->has_spot_checks()) s->set_spot_checks(3);
  if (!s->has_min_window_ms()) s->set_min_window_ms(10);
  if (!s->has_run_timeout_s()) s->set_run_timeout_s(300);
}

std::string CanonicalDtype(const std::string& name) {
  static const auto* const kAliases = new std::map<std::string, std::string>{
      {"bf16", "bfloat16"}, {"fp16", "float16"}, {"half", "float16"},  {"fp32", "float32"},
      {"float", "float32"}, {"fp64", "float64"}, {"double", "float64"}};
  auto it = kAliases->find(name);
  return it == kAliases->end() ? name : it->second;
}

std::string JobKey(const v1::EvalSpec& s, absl::string_view source, int32_t problem_version,
                   absl::string_view harness_version) {
  // Every keyed field, always: a field that enters only when it differs from a default would
  // make the key depend on where the default was declared.
  const std::string material = absl::StrCat(
      "pkb-job-key-v2\nproblem=", s.problem_id(), "\nversion=", problem_version,
      "\nworld_size=", s.world_size(), "\ndtype=", s.dtype(), "\nm=", s.m(), "\nn=", s.n(),
      "\nlanguage=", s.language(), "\ngpu_class=", s.gpu_class(), "\ntrials=", s.trials(),
      "\nwarmup=", s.warmup(), "\niters=", s.iters(), "\nmax_sets=", s.max_sets(),
      "\nl2_multiple=", s.l2_multiple(), "\nspot_checks=", s.spot_checks(),
      "\nmin_window_ms=", s.min_window_ms(), "\nset_offset=", s.set_offset(),
      "\nfunctional=", s.functional() ? 1 : 0, "\npractice=", s.practice() ? 1 : 0,
      "\nharness=", harness_version,
      "\nsource_sha256=", Sha256Hex(std::string_view(source.data(), source.size())), "\n");
  return Sha256Hex(material);
}

namespace {

enum class SpecForm { kBinary, kText, kJson };

SpecForm FormOf(const std::string& path) {
  if (absl::EndsWith(path, ".json")) return SpecForm::kJson;
  if (absl::EndsWith(path, ".txtpb") || absl::EndsWith(path, ".textproto") ||
      absl::EndsWith(path, ".pbtxt")) {
    return SpecForm::kText;
  }
  return SpecForm::kBinary;
}

}  // namespace

int TimedIterationsCap(const v1::EvalSpec& s) {
  return s.min_window_ms() > 0 ? std::max(s.iters(), kMaxTimedIterations) : s.iters();
}

int TimerStride(int calls, int iters) {
  return iters > 0 && calls > iters ? (calls + iters - 1) / iters : 1;
}

int MarkedCalls(int calls, int stride) {
  stride = std::max(1, stride);
  return calls > 0 ? (calls + stride - 1) / stride : 0;
}

int TimedSamples(int calls, int iters) { return MarkedCalls(calls, TimerStride(calls, iters)); }

absl::StatusOr<v1::EvalSpec> ReadSpecFile(const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadFile(path);
  if (!bytes.ok()) return bytes.status();
  v1::EvalSpec spec;
  bool ok = false;
  switch (FormOf(path)) {
    case SpecForm::kBinary:
      ok = spec.ParseFromString(*bytes);
      break;
    case SpecForm::kText:
      ok = google::protobuf::TextFormat::ParseFromString(*bytes, &spec);
      break;
    case SpecForm::kJson:
      ok = google::protobuf::util::JsonStringToMessage(*bytes, &spec).ok();
      break;
  }
  if (!ok) return absl::InvalidArgumentError(absl::StrCat(path, ": not a pkb.v1.EvalSpec"));
  return spec;
}

absl::Status WriteSpecFile(const std::string& path, const v1::EvalSpec& spec) {
  std::string out;
  switch (FormOf(path)) {
    case SpecForm::kBinary:
      spec.SerializeToString(&out);
      break;
    case SpecForm::kText:
      google::protobuf::TextFormat::PrintToString(spec, &out);
      break;
    case SpecForm::kJson: {
      google::protobuf::util::JsonPrintOptions o;
      o.preserve_proto_field_names = true;
      if (!google::protobuf::util::MessageToJsonString(spec, &out, o).ok())
        return absl::InternalError("cannot print the spec as JSON");
      break;
    }
  }
  return WriteFileAtomic(path, out);
}

}  // namespace pkb
