// Small filesystem helpers with Status errors.
#ifndef PKB_COMMON_FILES_H_
#define PKB_COMMON_FILES_H_

#include <string>

#include "absl/status/statusor.h"

namespace pkb {

absl::StatusOr<std::string> ReadFile(const std::string& path);
// Writes atomically: to a temporary file beside `path`, then rename.
absl::Status WriteFileAtomic(const std::string& path, const std::string& contents);
// Creates a fresh directory under `parent` (mkdtemp).
absl::StatusOr<std::string> MakeTempDir(const std::string& parent, const std::string& prefix);
absl::Status RemoveTree(const std::string& path);
// Waits for `path` to exist, polling every 2 ms: DEADLINE_EXCEEDED naming `what` after `limit_s`
// seconds.
absl::Status AwaitFile(const std::string& path, double limit_s, const std::string& what);

}  // namespace pkb

#endif  // PKB_COMMON_FILES_H_
