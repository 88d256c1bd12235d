// Status helpers shared by every component: one error model (absl::Status, whose canonical codes
// map one to one onto gRPC's) from the rank process to the RPC answer.
#ifndef PKB_COMMON_STATUS_MACROS_H_
#define PKB_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define PKB_STATUS_CONCAT_INNER_(a, b) a##b
#define PKB_STATUS_CONCAT_(a, b) PKB_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define PKB_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::absl::Status pkb_status_ = (expr);       \
    if (!pkb_status_.ok()) return pkb_status_; \
  } while (0)

// `PKB_ASSIGN_OR_RETURN(auto x, MakeX());` unwraps an absl::StatusOr or returns its error.
#define PKB_ASSIGN_OR_RETURN(lhs, expr) \
  PKB_ASSIGN_OR_RETURN_IMPL_(PKB_STATUS_CONCAT_(pkb_statusor_, __LINE__), lhs, expr)
#define PKB_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return std::move(tmp).status();   \
  lhs = std::move(tmp).value()

#endif  // PKB_COMMON_STATUS_MACROS_H_
