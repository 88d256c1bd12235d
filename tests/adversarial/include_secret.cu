// Pulls a host file into the compile (its text would appear in the diagnostics).
// Verdict: REJECTED by the static check [include-path]; inside the compile sandbox the file is
// not there either.
#include "/etc/shadow"
#include <pkb/candidate.h>
PKB_CANDIDATE_API_V1;
