// Logs of the daemons: spdlog, as text for people or as one JSON object per line for log
// pipelines (--log-format json), with the job and worker a line is about as fields.
//
//   ConfigureLogging("json", "pkb-worker", "node-7");       // once, in main
//   { LogScope scope(job_id, worker_id); spdlog::info("leased"); }
//   -> {"ts":"2026-12-03T12:00:00.123456Z","level":"info","component":"pkb-worker",
//       "worker":"node-7","job":"j...","msg":"leased"}
//
// LogScope is per thread and nests (the inner scope's non-empty ids win until it ends).
#ifndef PKB_COMMON_LOGGING_H_
#define PKB_COMMON_LOGGING_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace pkb {

// `format` is "text" (spdlog's default pattern) or "json". `worker` names this process's worker,
// if it is one (every line then carries it).
absl::Status ConfigureLogging(const std::string& format, const std::string& component,
                              const std::string& worker = "");

class LogScope {
 public:
  LogScope(std::string_view job, std::string_view worker = "");
  ~LogScope();
  LogScope(const LogScope&) = delete;
  LogScope& operator=(const LogScope&) = delete;

 private:
  std::string saved_job_, saved_worker_;
};

}  // namespace pkb

#endif  // PKB_COMMON_LOGGING_H_
