#include "common/logging.h"

#include <catch2/catch.hpp>
#include <memory>
#include <sstream>

#include "nlohmann/json.hpp"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"

namespace pkb {
namespace {

TEST_CASE("JSON logs: one object per line with component, worker and the scoped job") {
  std::ostringstream out;
  auto logger = std::make_shared<spdlog::logger>(
      "test", std::make_shared<spdlog::sinks::ostream_sink_mt>(out));
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(logger);
  REQUIRE(ConfigureLogging("json", "pkb-test", "node-1").ok());
  spdlog::info("plain \"quoted\" \n line");
  {
    LogScope scope("j123", "");
    spdlog::warn("about a job");
    {
      LogScope inner("", "w-other");
      spdlog::error("inner");
    }
  }
  spdlog::info(std::string("bad utf8 \xff end"));
  spdlog::set_default_logger(previous);
  std::istringstream lines(out.str());
  std::vector<nlohmann::json> j;
  for (std::string line; std::getline(lines, line);) j.push_back(nlohmann::json::parse(line));
  REQUIRE(j.size() == 4);
  CHECK(j[0]["component"] == "pkb-test");
  CHECK(j[0]["worker"] == "node-1");
  CHECK(j[0]["msg"] == "plain \"quoted\" \n line");
  CHECK_FALSE(j[0].contains("job"));
  CHECK(j[1]["job"] == "j123");
  CHECK(j[1]["level"] == "warning");
  CHECK(j[2]["job"] == "j123");
  CHECK(j[2]["worker"] == "w-other");
  CHECK_FALSE(j[3].contains("job"));  // the scope ended
  CHECK(std::string(j[0]["ts"]).back() == 'Z');
  CHECK(ConfigureLogging("xml", "x").code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(ConfigureLogging("text", "x").ok());
}

}  // namespace
}  // namespace pkb
