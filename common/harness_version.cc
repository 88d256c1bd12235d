#include "common/harness_version.h"

namespace pkb {

// 2: the submission in a process of its own, signed reports, the judge's wall clock stopped at
// the host's answer with the in-place checks copied then, the median tied to the wall clock.
// 4: windows of timed calls at least min_window_ms long (more calls than `iters` where they are
// short), each side's count judged from its warm-up.
// 6: the candidate timed in 5 rounds, each on sets of its own with spot checks of its own, its
// figure the median round.
const char* HarnessVersion() { return "pkb-harness-6"; }

}  // namespace pkb
