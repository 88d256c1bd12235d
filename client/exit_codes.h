// Exit codes of the `pkb` CLI, so an agent can act without parsing text. Stable: part of the API.
#ifndef PKB_CLIENT_EXIT_CODES_H_
#define PKB_CLIENT_EXIT_CODES_H_

#include "pkb/v1/result.pb.h"

namespace pkb {

enum ExitCode : int {
  kExitOk = 0,           // the command worked; for a verdict: status OK
  kExitError = 1,        // any other failure of the command
  kExitUsage = 2,        // bad command line
  kExitUnavailable = 3,  // the coordinator cannot be reached, or rate-limits you: retry later
  kExitNotFound = 4,     // no such job or problem (for a job: submit again)
  kExitInvalid = 5,      // the coordinator rejected the request (world size, problem, size)
  kExitDenied = 6,       // no token, an unknown token, or its role may not do this
  // Verdicts other than OK: 10 + (pkb.v1.Status - 2).
  kExitCompileError = 10,
  kExitRuntimeError = 11,
  kExitMismatch = 12,
  kExitTimeout = 13,
  kExitRejected = 14,
  kExitWorkerLost = 15,
  kExitInternal = 16,
  kExitNoDevice = 17,
  kExitCancelled = 18,
  kExitVoided = 19,   // an admin voided the verdict its worker reported
  kExitNotDone = 20,  // `pkb get`: the job has no verdict yet
};

inline int ExitCodeFor(v1::Status status) {
  if (status == v1::OK) return kExitOk;
  if (status >= v1::COMPILE_ERROR && status <= v1::VOIDED) return 10 + (status - v1::COMPILE_ERROR);
  return kExitError;
}

}  // namespace pkb

#endif  // PKB_CLIENT_EXIT_CODES_H_
