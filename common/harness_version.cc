#include "common/harness_version.h"

namespace pkb {

// 2: the submission in a process of its own, signed reports, the judge's wall clock stopped at
// the host's answer with the in-place checks copied then, the median tied to the wall clock.
const char* HarnessVersion() { return "pkb-harness-3"; }

}  // namespace pkb
