#include "common/logging.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "spdlog/pattern_formatter.h"
#include "spdlog/spdlog.h"

namespace pkb {
namespace {

thread_local std::string t_job;
thread_local std::string t_worker;

class JsonFormatter : public spdlog::formatter {
 public:
  JsonFormatter(std::string component, std::string worker)
      : component_(std::move(component)), worker_(std::move(worker)) {}

  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    nlohmann::json j;
    absl::Time t = absl::FromChrono(msg.time);
    j["ts"] = absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", t, absl::UTCTimeZone());
    j["level"] = std::string(spdlog::level::to_string_view(msg.level).data(),
                             spdlog::level::to_string_view(msg.level).size());
    j["component"] = component_;
    const std::string& worker = t_worker.empty() ? worker_ : t_worker;
    if (!worker.empty()) j["worker"] = worker;
    if (!t_job.empty()) j["job"] = t_job;
    j["msg"] = std::string(msg.payload.data(), msg.payload.size());
    // Replace invalid UTF-8 (a submission's bytes can reach a message) instead of throwing.
    std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    line += '\n';
    dest.append(line.data(), line.data() + line.size());
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>(component_, worker_);
  }

 private:
  const std::string component_, worker_;
};

}  // namespace

absl::Status ConfigureLogging(const std::string& format, const std::string& component,
                              const std::string& worker) {
  if (format == "text") return absl::OkStatus();
  if (format != "json") {
    return absl::InvalidArgumentError(
        absl::StrCat("log format '", format, "': want text or json"));
  }
  spdlog::set_formatter(std::make_unique<JsonFormatter>(component, worker));
  return absl::OkStatus();
}

LogScope::LogScope(std::string_view job, std::string_view worker)
    : saved_job_(t_job), saved_worker_(t_worker) {
  if (!job.empty()) t_job = std::string(job);
  if (!worker.empty()) t_worker = std::string(worker);
}

LogScope::~LogScope() {
  t_job = std::move(saved_job_);
  t_worker = std::move(saved_worker_);
}

}  // namespace pkb
