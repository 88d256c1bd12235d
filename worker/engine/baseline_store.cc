#include "worker/engine/baseline_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/hash.h"

namespace pkb {

std::string BaselineKey(int problem, int version, int world, int64_t m, int64_t n,
                        const std::string& dtype, int iters, double min_window_ms,
                        const std::string& gpu, const std::string& harness) {
  return absl::StrCat("problem ", problem, " v", version, " W", world, " M", m, " N", n, " ", dtype,
                      " iters ", iters, " window ", min_window_ms, " ms gpu ", gpu, " harness ",
                      harness);
}

absl::StatusOr<std::vector<double>> BaselineStore::Record(const std::string& key, double us) {
  return Update(key, us);
}

absl::StatusOr<std::vector<double>> BaselineStore::Recent(const std::string& key) {
  return Update(key, std::nullopt);
}

absl::StatusOr<std::vector<double>> BaselineStore::Update(const std::string& key,
                                                          std::optional<double> us) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec)
    return absl::UnavailableError(
        absl::StrCat("baselines: cannot create ", dir_, ": ", ec.message()));
  const std::string path = absl::StrCat(dir_, "/", Sha256Hex(key).substr(0, 32), ".txt");
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0)
    return absl::UnavailableError(absl::StrCat("baselines: ", path, ": ", strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { close(fd); }  // also releases the lock
  } closer{fd};
  if (flock(fd, LOCK_EX) != 0)
    return absl::UnavailableError(absl::StrCat("baselines: cannot lock ", path));
  const absl::Time now = now_();
  const std::string line = us ? absl::StrCat(*us, " ", absl::ToUnixSeconds(now), "\n") : "";
  if (write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size()))
    return absl::UnavailableError(absl::StrCat("baselines: cannot append to ", path));
  std::string text;
  if (lseek(fd, 0, SEEK_SET) != 0) return absl::UnavailableError("baselines: lseek");
  char buf[1 << 14];
  for (ssize_t got; (got = read(fd, buf, sizeof(buf))) > 0;)
    text.append(buf, static_cast<size_t>(got));
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  if (lines.size() >= static_cast<size_t>(kCompactAt)) {
    // Cut to the newest kKeep lines, in place (the lock is this file's): appends go on after it.
    lines.erase(lines.begin(), lines.end() - kKeep);
    const std::string kept = absl::StrCat(absl::StrJoin(lines, "\n"), "\n");
    if (ftruncate(fd, 0) != 0 ||
        write(fd, kept.data(), kept.size()) != static_cast<ssize_t>(kept.size())) {
      return absl::UnavailableError(absl::StrCat("baselines: cannot rewrite ", path));
    }
  }
  const int64_t oldest = absl::ToUnixSeconds(now - max_age_);
  // A line dated ahead (the clock was set back since) would outlive the limit: left out too.
  const int64_t newest = absl::ToUnixSeconds(now + absl::Hours(1));
  std::vector<double> recent;
  for (absl::string_view l : lines) {
    std::vector<absl::string_view> f = absl::StrSplit(l, ' ');
    double v;
    int64_t at;
    if (f.size() == 2 && absl::SimpleAtod(f[0], &v) && v > 0 && absl::SimpleAtoi(f[1], &at) &&
        at >= oldest && at <= newest) {
      recent.push_back(v);
    }
  }
  if (recent.size() > static_cast<size_t>(kKeep))
    recent.erase(recent.begin(), recent.end() - kKeep);
  return recent;
}

}  // namespace pkb
