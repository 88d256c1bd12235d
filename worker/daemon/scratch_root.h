// A worker's own folder under the node's scratch folder, where its jobs' folders go, and the
// removal of what dead workers left there.
//
//   absl::StatusOr<std::unique_ptr<ScratchRoot>> root = ScratchRoot::Create("/var/tmp", id);
//   EngineExecutor exec({.engine = ..., .scratch = (*root)->path()});
//
// A killed worker (kill -9, OOM, a node's power) never removes its jobs' folders. So each worker
// keeps its folder, `<scratch>/pkb-worker-<id>-XXXXXX`, locked (flock on `.owner` inside, held
// by an open descriptor for the worker's whole life; the kernel drops it when the process dies,
// however it dies). At start, Create removes every `pkb-worker-*` folder whose lock it can take:
// its owner is dead. Folders of live workers sharing the scratch folder are left alone (their
// lock is held), and so is everything else in the scratch folder. A folder is published under its
// `pkb-worker-` name only once its lock is held, so a starting worker never takes another
// starting worker's folder for a leftover.
//
// Thread-safety: a ScratchRoot is immutable after Create.
#ifndef PKB_WORKER_DAEMON_SCRATCH_ROOT_H_
#define PKB_WORKER_DAEMON_SCRATCH_ROOT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pkb {

class ScratchRoot {
 public:
  // Removes the folders of dead workers under `scratch` (their paths in `removed`, when given),
  // then makes and locks this worker's own. `worker_id` only names the folder, for people.
  static absl::StatusOr<std::unique_ptr<ScratchRoot>> Create(
      const std::string& scratch, const std::string& worker_id,
      std::vector<std::string>* removed = nullptr);

  // Removes the folder (a drained worker leaves nothing behind), then releases the lock.
  ~ScratchRoot();
  ScratchRoot(const ScratchRoot&) = delete;
  ScratchRoot& operator=(const ScratchRoot&) = delete;

  const std::string& path() const { return path_; }

 private:
  ScratchRoot(std::string path, int lock_fd) : path_(std::move(path)), lock_fd_(lock_fd) {}
  const std::string path_;
  const int lock_fd_;
};

// The removal Create does first: every `pkb-worker-*` folder under `scratch` whose owner is dead.
// Returns the folders removed. Errors reading `scratch` itself are returned; a folder that cannot
// be removed is skipped.
absl::StatusOr<std::vector<std::string>> RemoveDeadWorkerFolders(const std::string& scratch);

}  // namespace pkb

#endif  // PKB_WORKER_DAEMON_SCRATCH_ROOT_H_
