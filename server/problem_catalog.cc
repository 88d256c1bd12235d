#include "server/problem_catalog.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/eval_spec.h"
#include "common/hash.h"
#include "common/status_macros.h"
#include "common/subprocess.h"

namespace pkb {
namespace {

// Checks the completed spec's shape and dtype against what the problem offers. A catalog that
// states no limits (an engine from before they existed) gets the engine's own rule for every
// problem.
absl::Status CheckShape(const v1::ProblemSpec& p, const v1::EvalSpec& s) {
  std::vector<std::string> dtypes(p.dtypes().begin(), p.dtypes().end());
  if (dtypes.empty()) dtypes.push_back(p.default_dtype());
  if (std::find(dtypes.begin(), dtypes.end(), s.dtype()) == dtypes.end()) {
    return absl::InvalidArgumentError(absl::StrCat("dtype: problem ", p.id(), " (", p.slug(),
                                                   ") takes ", absl::StrJoin(dtypes, ", "),
                                                   ", not '", s.dtype(), "'"));
  }
  const int64_t max_m = p.max_m() > 0 ? p.max_m() : kDefaultMaxSide;
  const int64_t max_n = p.max_n() > 0 ? p.max_n() : kDefaultMaxSide;
  const int64_t max_mn = p.max_mn() > 0 ? p.max_mn() : kDefaultMaxArea;
  if (s.m() < 0 || s.m() > max_m) {
    return absl::InvalidArgumentError(absl::StrCat("m: ", s.m(), " is outside 1..", max_m,
                                                   " for problem ", p.id(), " (", p.slug(), ")"));
  }
  if (s.n() < 0 || s.n() > max_n) {
    return absl::InvalidArgumentError(absl::StrCat("n: ", s.n(), " is outside 1..", max_n,
                                                   " for problem ", p.id(), " (", p.slug(), ")"));
  }
  if (s.m() * s.n() > max_mn) {
    return absl::InvalidArgumentError(absl::StrCat("m * n: ", s.m(), " * ", s.n(), " is over ",
                                                   max_mn, " for problem ", p.id(), " (", p.slug(),
                                                   ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckRuns(const v1::EvalSpec& s) {
  struct Bound {
    const char* name;
    double value, min, max;
  };
  for (const Bound& b : {Bound{"trials", double(s.trials()), 1, kMaxTrials},
                         Bound{"warmup", double(s.warmup()), 0, kMaxWarmup},
                         Bound{"iters", double(s.iters()), 1, kMaxIters},
                         Bound{"max_sets", double(s.max_sets()), 1, kMaxSets},
                         Bound{"l2_multiple", s.l2_multiple(), 0, kMaxL2Multiple},
                         Bound{"spot_checks", double(s.spot_checks()), 0, kMaxSpotChecks},
                         Bound{"min_window_ms", s.min_window_ms(), 0, kMaxMinWindowMs},
                         Bound{"run_timeout_s", double(s.run_timeout_s()), 1, kMaxRunTimeoutS}}) {
    if (!(b.value >= b.min && b.value <= b.max)) {
      return absl::InvalidArgumentError(absl::StrCat(b.name, ": ", b.value, " is outside ", b.min,
                                                     "..", b.max, " (unset: the default)"));
    }
  }
  if (s.set_offset() != 0) {
    return absl::InvalidArgumentError(
        "set_offset: the seeds are the coordinator's to choose; ask for `ranked` (secret seeds)");
  }
  if (s.functional() && s.ranked()) {
    return absl::InvalidArgumentError(
        "functional and ranked exclude each other: a functional run checks correctness only "
        "and never ranks");
  }
  return absl::OkStatus();
}

}  // namespace

size_t InvalidUtf8At(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return i;
    }
    if (i + len > s.size()) return i;
    for (size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8.
    static constexpr uint32_t kMinOf[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMinOf[len] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return i;
    i += len;
  }
  return std::string::npos;
}

absl::StatusOr<ProblemCatalogIndex> ProblemCatalogIndex::FromCatalog(v1::ProblemCatalog catalog) {
  ProblemCatalogIndex index;
  index.catalog_ = std::move(catalog);
  index.listing_ = index.catalog_;
  for (v1::ProblemSpec& p : *index.listing_.mutable_problems()) p.clear_sources();
  for (int i = 0; i < index.catalog_.problems_size(); ++i) {
    const v1::ProblemSpec& p = index.catalog_.problems(i);
    if (!index.by_id_.emplace(p.id(), i).second) {
      return absl::InvalidArgumentError(absl::StrCat("catalog lists problem ", p.id(), " twice"));
    }
  }
  return index;
}

absl::StatusOr<ProblemCatalogIndex> ProblemCatalogIndex::FromJson(const std::string& json) {
  v1::ProblemCatalog catalog;
  google::protobuf::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = true;
  auto st = google::protobuf::util::JsonStringToMessage(json, &catalog, opts);
  if (!st.ok()) return absl::InvalidArgumentError(absl::StrCat("catalog JSON: ", st.ToString()));
  return FromCatalog(std::move(catalog));
}

absl::StatusOr<ProblemCatalogIndex> ProblemCatalogIndex::FromEngine(
    const std::string& engine_path) {
  SubprocessOptions opts;
  opts.argv = {engine_path, "--catalog"};
  opts.timeout = absl::Seconds(60);
  opts.max_output_bytes = 64 << 20;
  auto r = RunSubprocess(opts);
  if (!r.ok()) return r.status();
  if (r->timed_out || r->signaled || r->exit_code != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        engine_path, " --catalog failed (", r->Describe(), "): ", r->err.substr(0, 2000)));
  }
  return FromJson(r->out);
}

absl::StatusOr<const v1::ProblemSpec*> ProblemCatalogIndex::Find(int32_t id) const {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) {
    return absl::NotFoundError(absl::StrCat("no problem ", id, " (the catalog has ", by_id_.size(),
                                            " problems; `pkb problems list` shows them)"));
  }
  return &catalog_.problems(it->second);
}

absl::StatusOr<const v1::ProblemSpec*> ProblemCatalogIndex::FindSlug(
    const std::string& slug) const {
  for (const auto& p : catalog_.problems()) {
    if (p.slug() == slug) return &p;
  }
  return absl::NotFoundError(absl::StrCat("no problem with slug '", slug, "'"));
}

absl::Status ProblemCatalogIndex::Normalize(v1::SubmitRequest* request,
                                            const std::string& default_gpu_class) const {
  FoldLegacyFields(request);
  v1::EvalSpec& spec = *request->mutable_spec();
  auto found = Find(spec.problem_id());
  if (!found.ok()) return found.status();
  const v1::ProblemSpec& p = **found;
  if (request->source().empty()) return absl::InvalidArgumentError("the source is empty");
  if (request->source().size() > kMaxSourceBytes) {
    return absl::InvalidArgumentError(absl::StrCat("the source is ", request->source().size(),
                                                   " bytes; the limit is ", kMaxSourceBytes));
  }
  if (size_t bad = InvalidUtf8At(request->source()); bad != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("source: not UTF-8 text (an invalid byte sequence at byte offset ", bad, ")"));
  }
  const v1::WorldLayout* layout = nullptr;
  std::vector<int> offered;
  for (const auto& l : p.layouts()) {
    if (l.supported()) offered.push_back(l.world_size());
    if (l.world_size() == spec.world_size()) layout = &l;
  }
  if (layout == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("problem ", p.id(), " (", p.slug(), ") does not offer world size ",
                     spec.world_size(), "; supported: ", absl::StrJoin(offered, ", ")));
  }
  if (!layout->supported()) {
    return absl::InvalidArgumentError(absl::StrCat("problem ", p.id(), " (", p.slug(),
                                                   ") at world size ", spec.world_size(), ": ",
                                                   layout->unsupported_reason()));
  }
  if (spec.language().empty()) spec.set_language("cuda");
  if (spec.language() != "cuda" && spec.language() != "cpp") {
    return absl::InvalidArgumentError(absl::StrCat("language '", spec.language(),
                                                   "' is not known: \"cuda\" (the default) or "
                                                   "\"cpp\" (a host-only candidate)"));
  }
  if (spec.language() == "cpp") {
    // A host-only candidate runs on GPU-less workers only: a GPU node's engine has no CPU ranks.
    if (!spec.gpu_class().empty() && spec.gpu_class() != "cpu") {
      return absl::InvalidArgumentError(absl::StrCat(
          "language \"cpp\" runs on GPU-less workers only: gpu_class must be \"cpu\" (or "
          "empty), not '",
          spec.gpu_class(), "'"));
    }
  } else if (spec.gpu_class().empty()) {
    spec.set_gpu_class(default_gpu_class);
  }
  ApplyDefaults(&spec, &p);
  PKB_RETURN_IF_ERROR(CheckShape(p, spec));
  PKB_RETURN_IF_ERROR(CheckRuns(spec));
  MirrorLegacyFields(request);
  constexpr size_t kMaxMetadataBytes = 256, kMaxTags = 16, kMaxTagBytes = 64;
  for (const std::string* f : {&request->submitter(), &request->model(), &request->agent()}) {
    if (f->size() > kMaxMetadataBytes)
      return absl::InvalidArgumentError(
          absl::StrCat("submitter, model and agent take at most ", kMaxMetadataBytes, " bytes"));
  }
  if (static_cast<size_t>(request->tags_size()) > kMaxTags)
    return absl::InvalidArgumentError(absl::StrCat("at most ", kMaxTags, " tags"));
  for (const std::string& t : request->tags()) {
    if (t.empty() || t.size() > kMaxTagBytes || t.find('\x1f') != std::string::npos)
      return absl::InvalidArgumentError(
          absl::StrCat("a tag has 1 to ", kMaxTagBytes, " bytes and no control character 0x1f"));
  }
  return absl::OkStatus();
}

void FoldLegacyFields(v1::SubmitRequest* r) {
  v1::EvalSpec& s = *r->mutable_spec();
  if (s.problem_id() == 0) s.set_problem_id(r->problem_id());
  if (s.world_size() == 0) s.set_world_size(r->world_size());
  if (s.dtype().empty()) s.set_dtype(r->dtype());
  if (s.m() == 0) s.set_m(r->m());
  if (s.n() == 0) s.set_n(r->n());
  if (!s.has_trials() && r->trials() != 0) s.set_trials(r->trials());
  if (!s.has_warmup() && r->warmup() != 0) s.set_warmup(r->warmup());
  if (!s.has_iters() && r->iters() != 0) s.set_iters(r->iters());
  if (s.gpu_class().empty()) s.set_gpu_class(r->gpu_class());
  if (s.language().empty()) s.set_language(r->language());
  s.set_ranked(s.ranked() || r->ranked());
  s.set_practice(s.practice() || r->practice());
  s.set_functional(s.functional() || r->functional());
}

void MirrorLegacyFields(v1::SubmitRequest* r) {
  const v1::EvalSpec& s = r->spec();
  r->set_problem_id(s.problem_id());
  r->set_world_size(s.world_size());
  r->set_dtype(s.dtype());
  r->set_m(s.m());
  r->set_n(s.n());
  r->set_trials(s.trials());
  r->set_warmup(s.warmup());
  r->set_iters(s.iters());
  r->set_gpu_class(s.gpu_class());
  r->set_language(s.language());
  r->set_ranked(s.ranked());
  r->set_practice(s.practice());
  r->set_functional(s.functional());
}

v1::EvalSpec SpecOfRecord(const v1::SubmitRequest& request) {
  if (request.has_spec()) return request.spec();
  v1::SubmitRequest legacy = request;
  legacy.clear_source();
  FoldLegacyFields(&legacy);
  return legacy.spec();
}

void UpgradeStoredJob(v1::Job* job) {
  if (job->request().has_spec()) return;
  v1::SubmitRequest* r = job->mutable_request();
  FoldLegacyFields(r);
  ApplyDefaults(r->mutable_spec());
}

}  // namespace pkb
