// What the end-to-end tests of pkb-eval share: running it on a CPU candidate, its JSON result.
#ifndef PKB_TESTS_ENGINE_E2E_EVAL_H_
#define PKB_TESTS_ENGINE_E2E_EVAL_H_

#include <catch2/catch.hpp>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "common/subprocess.h"
#include "nlohmann/json.hpp"

#if !defined(PKB_SOURCE_DIR) || !defined(PKB_EVAL)
#error "PKB_SOURCE_DIR and PKB_EVAL come from the build (tests/engine/CMakeLists.txt)"
#endif

namespace pkb {

inline const std::string kSrc = PKB_SOURCE_DIR;

// pkb-eval with `argv` (its own path first), which must exit 0: its JSON result.
inline nlohmann::json RunEvalJson(std::vector<std::string> argv) {
  SubprocessOptions o;
  o.argv = std::move(argv);
  o.timeout = absl::Seconds(240);
  auto r = RunSubprocess(o);
  REQUIRE(r.ok());
  INFO(r->err);
  REQUIRE(r->exit_code == 0);
  return nlohmann::json::parse(r->out);
}

inline nlohmann::json Eval(std::vector<std::string> args) {
  std::vector<std::string> argv = {PKB_EVAL, "--json", "--m=64",
                                   "--n=64", "-I",     kSrc + "/tests/engine/cpu_candidates"};
  bool iters = false, warmup = false;
  for (auto& a : args) {
    iters = iters || a.rfind("--iters", 0) == 0;
    warmup = warmup || a.rfind("--warmup", 0) == 0;
    argv.push_back(a);
  }
  if (!iters) argv.push_back("--iters=8");
  if (!warmup) argv.push_back("--warmup=3");
  return RunEvalJson(std::move(argv));
}

inline std::string Cpu(const std::string& name) {
  return kSrc + "/tests/engine/cpu_candidates/" + name;
}

}  // namespace pkb

#endif  // PKB_TESTS_ENGINE_E2E_EVAL_H_
