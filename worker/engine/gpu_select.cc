#include "worker/engine/gpu_select.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/files.h"

namespace pkb {

absl::StatusOr<std::vector<std::string>> ParseGpuUuids(const std::string& list) {
  std::vector<std::string> uuids;
  std::set<std::string> seen;
  for (absl::string_view item : absl::StrSplit(list, ',')) {
    item = absl::StripAsciiWhitespace(item);
    const bool shaped = absl::StartsWith(item, "GPU-") && item.size() == 40 &&
                        std::all_of(item.begin() + 4, item.end(),
                                    [](char c) { return absl::ascii_isxdigit(c) || c == '-'; });
    if (!shaped) {
      return absl::InvalidArgumentError(
          absl::StrCat("--gpus: '", item,
                       "' is not a GPU UUID (\"GPU-\" and 36 hex digits and dashes, as "
                       "`nvidia-smi --query-gpu=uuid --format=csv,noheader` prints them)"));
    }
    if (!seen.insert(absl::AsciiStrToLower(item)).second) {  // the same GPU in either case
      return absl::InvalidArgumentError(absl::StrCat("--gpus: ", item, " is given twice"));
    }
    uuids.emplace_back(item);
  }
  return uuids;
}

int NodeGpuCount(const std::string& driver_dir) {
  int n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(driver_dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    std::error_code exists_ec;
    if (std::filesystem::exists(it->path() / "information", exists_ec)) ++n;
  }
  return n;
}

absl::StatusOr<std::vector<int>> GpuMinors(const std::vector<std::string>& uuids,
                                           const std::string& driver_dir) {
  std::map<std::string, int> minor_of;  // lower-case UUID -> minor
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(driver_dir, ec)) {
    absl::StatusOr<std::string> text = ReadFile((entry.path() / "information").string());
    if (!text.ok()) continue;
    std::string uuid;
    int minor = -1;
    for (absl::string_view line : absl::StrSplit(*text, '\n')) {
      std::pair<absl::string_view, absl::string_view> kv =
          absl::StrSplit(line, absl::MaxSplits(':', 1));
      const absl::string_view key = absl::StripAsciiWhitespace(kv.first);
      const absl::string_view value = absl::StripAsciiWhitespace(kv.second);
      if (key == "GPU UUID") uuid = absl::AsciiStrToLower(value);
      if (key == "Device Minor" && !absl::SimpleAtoi(value, &minor)) minor = -1;
    }
    if (!uuid.empty() && minor >= 0) minor_of[uuid] = minor;
  }
  std::vector<int> minors;
  for (const std::string& uuid : uuids) {
    auto it = minor_of.find(absl::AsciiStrToLower(uuid));
    if (it == minor_of.end()) {
      return absl::NotFoundError(absl::StrCat("--gpus: the driver lists no GPU ", uuid, " (",
                                              minor_of.size(), " GPU(s) in ", driver_dir, ")"));
    }
    minors.push_back(it->second);
  }
  return minors;
}

std::vector<std::string> GpuDeviceNodes(const std::string& dev_dir,
                                        const std::vector<int>& minors) {
  std::vector<std::string> nodes;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dev_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!absl::StartsWith(name, "nvidia")) continue;
    int minor = -1;
    // A GPU's own node is nvidia<minor>; the others (nvidiactl, nvidia-uvm...) every job needs.
    if (!minors.empty() && absl::SimpleAtoi(absl::StripPrefix(name, "nvidia"), &minor) &&
        std::find(minors.begin(), minors.end(), minor) == minors.end()) {
      continue;
    }
    nodes.push_back(entry.path().string());
  }
  std::sort(nodes.begin(), nodes.end());
  return nodes;
}

}  // namespace pkb
