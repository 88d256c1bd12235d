// Static checks on a submission's source, before it is compiled: a policy of what a kernel for
// this service has no reason to do, each rule with the reason an author is shown.
//
//   std::vector<v1::Diagnostic> findings = CheckSource(source, "kernel.cu");
//   if (!findings.empty()) ... verdict REJECTED, the findings as diagnostics
//
// The sandbox (sandbox.h) is the boundary that holds when a rule is evaded (a name built by
// macro pasting, a pointer found in memory); the rules catch the plain attempts early and say
// why, so an honest author learns the policy and a dishonest one gains nothing by trying.
// docs/security.md explains every rule.
#ifndef PKB_WORKER_ENGINE_STATIC_CHECK_H_
#define PKB_WORKER_ENGINE_STATIC_CHECK_H_

#include <string>
#include <vector>

#include "pkb/v1/result.pb.h"

namespace pkb {

struct StaticRule {
  std::string id;       // "environment", "network", ...
  std::string pattern;  // ECMAScript regex, matched against code with comments removed
  bool in_strings;      // match string literals too (paths such as "/proc/")
  std::string reason;   // shown to the author
  // ECMAScript regex: a match is no finding where the line's text just before it (its last 64
  // characters) matches this (a member call `t.clone()`, an ATen op `at::clone(...)`); empty:
  // every match is one.
  std::string not_after = "";
};

// The rules, in the order they are checked (docs/security.md lists them).
const std::vector<StaticRule>& StaticRules();

// One diagnostic (severity "error", message "[rule] reason: `match`") per rule and line that
// breaks the policy; empty when the source passes.
std::vector<v1::Diagnostic> CheckSource(const std::string& source, const std::string& name);

}  // namespace pkb

#endif  // PKB_WORKER_ENGINE_STATIC_CHECK_H_
