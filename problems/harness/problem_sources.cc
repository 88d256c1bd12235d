#include "problems/harness/problem_sources.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace pkb {

// Defined in the generated problem_sources_embedded.cc.
extern const EmbeddedSource kEmbeddedSources[];
extern const int kEmbeddedSourceCount;

namespace {

const EmbeddedSource* Find(absl::string_view path) {
  for (int i = 0; i < kEmbeddedSourceCount; ++i)
    if (kEmbeddedSources[i].path == path) return &kEmbeddedSources[i];
  return nullptr;
}

}  // namespace

std::vector<EmbeddedSource> ProblemSources(int id) {
  std::vector<EmbeddedSource> out;
  const std::string prefix = absl::StrFormat("/p%03d_", id);
  for (int i = 0; i < kEmbeddedSourceCount; ++i) {
    const EmbeddedSource& s = kEmbeddedSources[i];
    if (absl::StrContains(s.path, prefix) && absl::EndsWith(s.path, ".cc")) {
      out.push_back(s);
      break;
    }
  }
  if (out.empty()) return out;
  for (absl::string_view line : absl::StrSplit(out[0].text, '\n')) {
    constexpr absl::string_view kInclude = "#include \"problems/";
    if (!absl::StartsWith(line, kInclude)) continue;
    absl::string_view header = line.substr(kInclude.size() - absl::string_view("problems/").size());
    header = header.substr(0, header.find('"'));
    if (absl::StartsWith(header, "problems/harness/") || !absl::EndsWith(header, ".h")) continue;
    if (const EmbeddedSource* h = Find(header)) out.push_back(*h);
    std::string body(header.substr(0, header.size() - 2));
    if (const EmbeddedSource* c = Find(body + ".cc")) out.push_back(*c);
  }
  return out;
}

}  // namespace pkb
