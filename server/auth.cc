#include "server/auth.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/files.h"
#include "common/status_macros.h"

namespace pkb {

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
    if (f.size() != 3)
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line_no, ": want `token role name`"));
    Principal p;
    p.name = f[2];
    if (f[1] == "agent") {
      p.role = Role::kAgent;
    } else if (f[1] == "researcher") {
      p.role = Role::kResearcher;
    } else if (f[1] == "worker") {
      p.role = Role::kWorker;
    } else if (f[1] == "admin") {
      p.role = Role::kAdmin;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line_no, ": unknown role '", f[1], "'"));
    }
    auth->tokens_[f[0]] = p;
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
