// Who may call what: bearer tokens that carry a role, and a per-token rate limit on Submit.
//
// The tokens file has one token a line: `<token> <role> <name>`, role one of agent, researcher,
// worker, admin; `#` starts a comment. Clients send `authorization: Bearer <token>`. Names are
// unique: a job belongs to the name of the token that submitted it.
//
// A worker token names one worker (or one node's workers) and grants what it may serve, so that
// a worker's capabilities come from the coordinator's configuration, not from its own word:
//
//   <token> worker <name> gpu_class=<class> max_world_size=<W> [slots=<n>]
//
// It may register only as worker `<name>` or `<name>/<anything>`, for that GPU class and at most
// that world size (server/worker_service.cc).
//
//   PKB_ASSIGN_OR_RETURN(auto auth, TokenAuth::FromFile("/etc/pkb/tokens", 20, 40));
//   absl::StatusOr<Principal> who = auth->Check(ctx, {Role::kAgent, Role::kAdmin});
//
// Without a tokens file the coordinator runs open (every call is an anonymous admin): for
// loopback and tests only. Thread-safe.
#ifndef PKB_SERVER_AUTH_H_
#define PKB_SERVER_AUTH_H_

#include <grpcpp/server_context.h>

#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace pkb {

enum class Role { kAgent, kResearcher, kWorker, kAdmin };

// What a worker token lets its holder serve.
struct WorkerGrant {
  std::string gpu_class;
  int32_t max_world_size = 0;
  int32_t slots = 1;
};

struct Principal {
  std::string name;
  Role role = Role::kAdmin;
  std::optional<WorkerGrant> worker;  // role worker under --tokens
};

class TokenAuth {
 public:
  // An open coordinator: no check.
  TokenAuth() = default;
  // `submit_rate` submissions per second per token, bursts up to `submit_burst`.
  static absl::StatusOr<std::unique_ptr<TokenAuth>> FromFile(const std::string& path,
                                                             double submit_rate,
                                                             double submit_burst);

  // UNAUTHENTICATED without a known token; PERMISSION_DENIED when its role is not in `allowed`
  // (admin is always allowed).
  absl::StatusOr<Principal> Check(const grpc::CallbackServerContext* ctx,
                                  std::initializer_list<Role> allowed);
  // RESOURCE_EXHAUSTED when the principal's Submit budget is spent.
  absl::Status ChargeSubmit(const Principal& who);

  bool enabled() const { return !tokens_.empty(); }
  // The GPU classes the worker tokens grant (empty on an open coordinator).
  std::set<std::string> GrantedGpuClasses() const;

 private:
  struct Bucket {
    double tokens = 0;
    absl::Time refilled;
  };
  std::map<std::string, Principal> tokens_;  // immutable after FromFile
  double rate_ = 0, burst_ = 0;
  absl::Mutex mu_;
  std::map<std::string, Bucket> buckets_ ABSL_GUARDED_BY(mu_);  // by principal name
};

}  // namespace pkb

#endif  // PKB_SERVER_AUTH_H_
