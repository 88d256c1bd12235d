#include "server/auth.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/files.h"
#include "common/status_macros.h"

namespace pkb {
namespace {

absl::StatusOr<WorkerGrant> ParseGrant(const std::vector<std::string>& fields,
                                       const std::string& where) {
  WorkerGrant g;
  for (const std::string& kv : fields) {
    std::pair<std::string, std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
    int32_t v = 0;
    if (p.first == "gpu_class" && !p.second.empty()) {
      g.gpu_class = p.second;
    } else if (p.first == "max_world_size" && absl::SimpleAtoi(p.second, &v) && v > 0) {
      g.max_world_size = v;
    } else if (p.first == "slots" && absl::SimpleAtoi(p.second, &v) && v > 0) {
      g.slots = v;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "'", kv, "': want gpu_class=C, max_world_size=W (> 0) or slots=N (> 0)"));
    }
  }
  if (g.gpu_class.empty() || g.max_world_size == 0)
    return absl::InvalidArgumentError(absl::StrCat(
        where,
        "a worker token grants gpu_class=C and max_world_size=W (its capabilities come "
        "from here, not from the worker)"));
  return g;
}

}  // namespace

std::set<std::string> TokenAuth::GrantedGpuClasses() const {
  std::set<std::string> classes;
  for (const auto& [token, p] : tokens_) {
    if (p.worker) classes.insert(p.worker->gpu_class);
  }
  return classes;
}

absl::StatusOr<std::unique_ptr<TokenAuth>> TokenAuth::FromFile(const std::string& path,
                                                               double submit_rate,
                                                               double submit_burst) {
  PKB_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  auto auth = std::make_unique<TokenAuth>();
  auth->rate_ = submit_rate;
  auth->burst_ = std::max(submit_burst, 1.0);
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    const std::string where = absl::StrCat(path, ":", line_no, ": ");
    if (f.size() < 3 || (f.size() > 3 && f[1] != "worker"))
      return absl::InvalidArgumentError(absl::StrCat(
          where,
          "want `token role name` (a worker: `token worker name gpu_class=C max_world_size=W`)"));
    Principal p;
    p.name = f[2];
    if (f[1] == "agent") {
      p.role = Role::kAgent;
    } else if (f[1] == "researcher") {
      p.role = Role::kResearcher;
    } else if (f[1] == "worker") {
      p.role = Role::kWorker;
      PKB_ASSIGN_OR_RETURN(p.worker,
                           ParseGrant(std::vector<std::string>(f.begin() + 3, f.end()), where));
    } else if (f[1] == "admin") {
      p.role = Role::kAdmin;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line_no, ": unknown role '", f[1], "'"));
    }
    for (const auto& [token, other] : auth->tokens_) {
      if (other.name == p.name)
        return absl::InvalidArgumentError(
            absl::StrCat(where, "the name '", p.name, "' is taken by another token"));
    }
    if (!auth->tokens_.emplace(f[0], p).second)
      return absl::InvalidArgumentError(absl::StrCat(where, "this token is listed twice"));
  }
  if (auth->tokens_.empty())
    return absl::InvalidArgumentError(absl::StrCat(path, " holds no token"));
  return auth;
}

absl::StatusOr<Principal> TokenAuth::Check(const grpc::CallbackServerContext* ctx,
                                           std::initializer_list<Role> allowed) {
  if (!enabled()) return Principal{"anonymous", Role::kAdmin};
  const auto& md = ctx->client_metadata();
  auto it = md.find("authorization");
  if (it == md.end())
    return absl::UnauthenticatedError("no token: send `authorization: Bearer <token>`");
  absl::string_view value(it->second.data(), it->second.size());
  if (!absl::ConsumePrefix(&value, "Bearer "))
    return absl::UnauthenticatedError("authorization is not `Bearer <token>`");
  auto t = tokens_.find(std::string(value));
  if (t == tokens_.end()) return absl::UnauthenticatedError("unknown token");
  const Principal& p = t->second;
  if (p.role == Role::kAdmin || std::find(allowed.begin(), allowed.end(), p.role) != allowed.end())
    return p;
  return absl::PermissionDeniedError(absl::StrCat("token '", p.name, "' may not call this"));
}

absl::Status TokenAuth::ChargeSubmit(const Principal& who) {
  if (!enabled() || rate_ <= 0) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  absl::Time now = absl::Now();
  auto [it, fresh] = buckets_.try_emplace(who.name);
  Bucket& b = it->second;
  if (fresh) {
    b.tokens = burst_;
  } else {
    b.tokens = std::min(burst_, b.tokens + absl::ToDoubleSeconds(now - b.refilled) * rate_);
  }
  b.refilled = now;
  if (b.tokens < 1) {
    return absl::ResourceExhaustedError(
        absl::StrCat("'", who.name, "' submits faster than ", rate_, "/s; retry in a moment"));
  }
  b.tokens -= 1;
  return absl::OkStatus();
}

}  // namespace pkb
