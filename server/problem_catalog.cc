#include "server/problem_catalog.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/hash.h"
#include "common/job_key.h"
#include "common/status_macros.h"
#include "common/subprocess.h"

namespace pkb {
namespace {

// The engine's run dtypes by their short names too (as pkb-eval --dtype takes them).
std::string CanonicalDtype(const std::string& name) {
  static const std::map<std::string, std::string> kAliases = {
      {"bf16", "bfloat16"}, {"fp16", "float16"}, {"half", "float16"},  {"fp32", "float32"},
      {"float", "float32"}, {"fp64", "float64"}, {"double", "float64"}};
  auto it = kAliases.find(name);
  return it == kAliases.end() ? name : it->second;
}

// Fills in m, n and dtype and checks them against what the problem offers. A catalog that states
// no limits (an engine from before they existed) gets the engine's own rule for every problem.
absl::Status CheckShape(const v1::ProblemSpec& p, v1::SubmitRequest* request) {
  request->set_dtype(request->dtype().empty() ? p.default_dtype()
                                              : CanonicalDtype(request->dtype()));
  std::vector<std::string> dtypes(p.dtypes().begin(), p.dtypes().end());
  if (dtypes.empty()) dtypes.push_back(p.default_dtype());
  if (std::find(dtypes.begin(), dtypes.end(), request->dtype()) == dtypes.end()) {
    return absl::InvalidArgumentError(absl::StrCat("dtype: problem ", p.id(), " (", p.slug(),
                                                   ") takes ", absl::StrJoin(dtypes, ", "),
                                                   ", not '", request->dtype(), "'"));
  }
  if (request->m() == 0) request->set_m(p.default_m());
  if (request->n() == 0) request->set_n(p.default_n());
  const int64_t max_m = p.max_m() > 0 ? p.max_m() : kDefaultMaxSide;
  const int64_t max_n = p.max_n() > 0 ? p.max_n() : kDefaultMaxSide;
  const int64_t max_mn = p.max_mn() > 0 ? p.max_mn() : kDefaultMaxArea;
  if (request->m() < 0 || request->m() > max_m) {
    return absl::InvalidArgumentError(absl::StrCat("m: ", request->m(), " is outside 1..", max_m,
                                                   " for problem ", p.id(), " (", p.slug(), ")"));
  }
  if (request->n() < 0 || request->n() > max_n) {
    return absl::InvalidArgumentError(absl::StrCat("n: ", request->n(), " is outside 1..", max_n,
                                                   " for problem ", p.id(), " (", p.slug(), ")"));
  }
  if (request->m() * request->n() > max_mn) {
    return absl::InvalidArgumentError(absl::StrCat("m * n: ", request->m(), " * ", request->n(),
                                                   " is over ", max_mn, " for problem ", p.id(),
                                                   " (", p.slug(), ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckRuns(const v1::SubmitRequest& r) {
  struct Bound {
    const char* name;
    int32_t value, max;
  };
  for (const Bound& b :
       {Bound{"trials", r.trials(), kMaxTrials}, Bound{"warmup", r.warmup(), kMaxWarmup},
        Bound{"iters", r.iters(), kMaxIters}}) {
    if (b.value < 0 || b.value > b.max) {
      return absl::InvalidArgumentError(
          absl::StrCat(b.name, ": ", b.value, " is outside 0..", b.max, " (0: the default)"));
    }
  }
  if (r.functional() && r.ranked()) {
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

absl::Status ProblemCatalogIndex::Normalize(v1::SubmitRequest* request) const {
  auto found = Find(request->problem_id());
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
    if (l.world_size() == request->world_size()) layout = &l;
  }
  if (layout == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("problem ", p.id(), " (", p.slug(), ") does not offer world size ",
                     request->world_size(), "; supported: ", absl::StrJoin(offered, ", ")));
  }
  if (!layout->supported()) {
    return absl::InvalidArgumentError(absl::StrCat("problem ", p.id(), " (", p.slug(),
                                                   ") at world size ", request->world_size(), ": ",
                                                   layout->unsupported_reason()));
  }
  if (request->language().empty()) request->set_language("cuda");
  if (request->language() != "cuda" && request->language() != "cpp") {
    return absl::InvalidArgumentError(absl::StrCat("language '", request->language(),
                                                   "' is not known: \"cuda\" (the default) or "
                                                   "\"cpp\" (a host-only candidate)"));
  }
  if (request->language() == "cpp") {
    // A host-only candidate runs on GPU-less workers only: a GPU node's engine has no CPU ranks.
    if (request->gpu_class().empty()) request->set_gpu_class("cpu");
    if (request->gpu_class() != "cpu") {
      return absl::InvalidArgumentError(absl::StrCat(
          "language \"cpp\" runs on GPU-less workers only: gpu_class must be \"cpu\" (or "
          "empty), not '",
          request->gpu_class(), "'"));
    }
  }
  PKB_RETURN_IF_ERROR(CheckShape(p, request));
  PKB_RETURN_IF_ERROR(CheckRuns(*request));
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

std::string JobKey(const v1::SubmitRequest& r, int32_t problem_version,
                   const std::string& harness_version, int64_t set_offset) {
  JobKeyFields f;
  f.source = r.source();
  f.problem_id = r.problem_id();
  f.problem_version = problem_version;
  f.world_size = r.world_size();
  f.dtype = r.dtype();
  f.m = r.m();
  f.n = r.n();
  f.trials = r.trials();
  f.warmup = r.warmup();
  f.iters = r.iters();
  f.gpu_class = r.gpu_class();
  f.harness_version = harness_version;
  f.language = r.language();
  f.set_offset = set_offset;
  f.functional = r.functional();
  return pkb::JobKey(f);
}

}  // namespace pkb
