#include "common/files.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace pkb {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", strerror(errno)));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::Status WriteFileAtomic(const std::string& path, const std::string& contents) {
  std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", tmp, ": ", strerror(errno)));
    out << contents;
    if (!out.flush()) return absl::InternalError(absl::StrCat("short write to ", tmp));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec)
    return absl::InternalError(absl::StrCat("rename ", tmp, " -> ", path, ": ", ec.message()));
  return absl::OkStatus();
}

absl::StatusOr<std::string> MakeTempDir(const std::string& parent, const std::string& prefix) {
  std::error_code ec;
  std::filesystem::create_directories(parent, ec);
  std::string templ = absl::StrCat(parent, "/", prefix, "XXXXXX");
  if (mkdtemp(templ.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp in ", parent, ": ", strerror(errno)));
  }
  return templ;
}

absl::Status RemoveTree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) return absl::InternalError(absl::StrCat("remove ", path, ": ", ec.message()));
  return absl::OkStatus();
}

absl::Status AwaitFile(const std::string& path, double limit_s, const std::string& what) {
  const auto limit = std::chrono::steady_clock::now() +
                     std::chrono::microseconds(static_cast<int64_t>(limit_s * 1e6));
  while (access(path.c_str(), F_OK) != 0) {
    if (std::chrono::steady_clock::now() > limit) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, " did not come within ", limit_s, " s of waiting for it"));
    }
    usleep(2000);
  }
  return absl::OkStatus();
}

}  // namespace pkb
