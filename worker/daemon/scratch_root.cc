#include "worker/daemon/scratch_root.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/files.h"

namespace pkb {
namespace {

namespace fs = std::filesystem;

constexpr char kPrefix[] = "pkb-worker-";
// A folder being made: renamed to kPrefix... once its lock is held.
constexpr char kNewPrefix[] = ".pkb-worker-new-";
constexpr char kOwnerFile[] = ".owner";
// A folder without a lockable owner file (a worker killed while making or removing it) is left
// alone this long: it may be a starting worker's.
constexpr auto kUnownedGrace = std::chrono::seconds(60);

std::string FolderName(const std::string& worker_id) {
  std::string name;
  for (char c : worker_id.substr(0, 64)) {
    bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '_' || c == '-';
    name += plain ? c : '_';
  }
  return name.empty() ? "anonymous" : name;
}

bool OlderThanGrace(const fs::path& dir) {
  std::error_code ec;
  auto mtime = fs::last_write_time(dir, ec);
  return !ec && fs::file_time_type::clock::now() - mtime > kUnownedGrace;
}

// Whether `dir`'s owner is dead; when it is, `*lock_fd` holds the owner's lock (or -1 when there
// is no owner file), to be closed once `dir` is gone.
bool OwnerDead(const fs::path& dir, bool being_made, int* lock_fd) {
  *lock_fd = -1;
  int fd = open((dir / kOwnerFile).c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return errno == ENOENT && OlderThanGrace(dir);
  if (flock(fd, LOCK_EX | LOCK_NB) != 0 || (being_made && !OlderThanGrace(dir))) {
    close(fd);  // held: its worker lives
    return false;
  }
  *lock_fd = fd;
  return true;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> RemoveDeadWorkerFolders(const std::string& scratch) {
  std::error_code ec;
  fs::directory_iterator it(scratch, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read the scratch folder '", scratch, "': ", ec.message()));
  }
  std::vector<std::string> removed;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const bool being_made = absl::StartsWith(name, kNewPrefix);
    if (!being_made && !absl::StartsWith(name, kPrefix)) continue;
    std::error_code st_ec;
    if (!it->is_directory(st_ec) || it->is_symlink(st_ec)) continue;
    int lock_fd;
    if (!OwnerDead(it->path(), being_made, &lock_fd)) continue;
    std::error_code rm_ec;
    fs::remove_all(it->path(), rm_ec);
    if (lock_fd >= 0) close(lock_fd);
    if (!rm_ec) removed.push_back(it->path().string());
  }
  return removed;
}

absl::StatusOr<std::unique_ptr<ScratchRoot>> ScratchRoot::Create(
    const std::string& scratch, const std::string& worker_id, std::vector<std::string>* removed) {
  std::error_code ec;
  fs::create_directories(scratch, ec);
  absl::StatusOr<std::vector<std::string>> gone = RemoveDeadWorkerFolders(scratch);
  if (!gone.ok()) return gone.status();
  if (removed) *removed = std::move(*gone);

  absl::StatusOr<std::string> made =
      MakeTempDir(scratch, absl::StrCat(kNewPrefix, FolderName(worker_id), "-"));
  if (!made.ok()) return made.status();
  const std::string owner = *made + "/" + kOwnerFile;
  int fd = open(owner.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) != 0) {
    std::string why = strerror(errno);
    if (fd >= 0) close(fd);
    RemoveTree(*made).IgnoreError();
    return absl::InternalError(absl::StrCat("cannot lock ", owner, ": ", why));
  }
  std::string note = absl::StrCat("pid ", getpid(), "\nworker ", worker_id, "\n");
  (void)!write(fd, note.data(), note.size());
  // Search-only for others: the engine's sandbox runs the submission as another uid, which must
  // pass through to the job folders (docs/security.md).
  fs::permissions(*made, fs::perms(0711), ec);
  const std::string path =
      absl::StrCat(scratch, "/", kPrefix, made->substr(made->rfind('/') + 1 + strlen(kNewPrefix)));
  if (rename(made->c_str(), path.c_str()) != 0) {
    std::string why = strerror(errno);
    close(fd);
    RemoveTree(*made).IgnoreError();
    return absl::InternalError(absl::StrCat("cannot rename ", *made, " to ", path, ": ", why));
  }
  return std::unique_ptr<ScratchRoot>(new ScratchRoot(path, fd));
}

ScratchRoot::~ScratchRoot() {
  RemoveTree(path_).IgnoreError();
  close(lock_fd_);
}

}  // namespace pkb
