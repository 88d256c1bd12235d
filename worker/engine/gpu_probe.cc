#include "worker/engine/gpu_probe.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/files.h"
#include "common/hash.h"
#include "common/subprocess.h"

namespace pkb {

std::string GpuProbeKey(const std::string& rank_binary) {
  std::string material;
  for (const char* path : {"/proc/sys/kernel/random/boot_id", "/proc/driver/nvidia/version"}) {
    absl::StatusOr<std::string> text = ReadFile(path);
    absl::StrAppend(&material, path, "=", text.ok() ? *text : "(none)", "\n");
  }
  const char* visible = getenv("CUDA_VISIBLE_DEVICES");
  absl::StrAppend(&material, "CUDA_VISIBLE_DEVICES", visible ? "=" : " unset",
                  visible ? visible : "", "\n");
  struct stat st {};
  if (stat(rank_binary.c_str(), &st) == 0) {
    absl::StrAppend(&material, rank_binary, " ", st.st_size, " ", st.st_mtim.tv_sec, ".",
                    st.st_mtim.tv_nsec, "\n");
  } else {
    absl::StrAppend(&material, rank_binary, " missing\n");
  }
  return Sha256Hex(material);
}

int ProbeGpuCount(const std::string& rank_binary, const std::string& cache_dir) {
  std::string kept;
  if (!cache_dir.empty()) {
    kept = absl::StrCat(cache_dir, "/gpu-probe/", GpuProbeKey(rank_binary));
    int count = 0;
    if (absl::StatusOr<std::string> text = ReadFile(kept);
        text.ok() && absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &count) && count > 0) {
      return count;
    }
  }
  SubprocessOptions o;
  o.argv = {rank_binary, "probe"};
  o.timeout = absl::Seconds(60);
  absl::StatusOr<SubprocessResult> r = RunSubprocess(o);
  if (!r.ok() || r->exit_code != 0 || r->signaled) return 0;
  int count = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(r->out), &count) || count <= 0) return 0;
  if (!kept.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(kept).parent_path(), ec);
    // A count that cannot be kept is asked again next time; the job goes on either way.
    (void)WriteFileAtomic(kept, absl::StrCat(count, "\n"));
  }
  return count;
}

}  // namespace pkb
