#include "server/problem_catalog.h"

#include <google/protobuf/util/json_util.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/hash.h"
#include "common/job_key.h"
#include "common/subprocess.h"

namespace pkb {

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
  if (request->dtype().empty()) request->set_dtype(p.default_dtype());
  if (request->m() == 0) request->set_m(p.default_m());
  if (request->n() == 0) request->set_n(p.default_n());
  if (request->m() < 0 || request->n() < 0 || request->trials() < 0 || request->warmup() < 0 ||
      request->iters() < 0) {
    return absl::InvalidArgumentError("m, n, trials, warmup and iters must not be negative");
  }
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
  return pkb::JobKey(f);
}

}  // namespace pkb
