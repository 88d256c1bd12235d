// The harness version: part of every job key, so that results of an older harness are never
// served from the cache. Bump it in harness_version.cc whenever verification or timing changes
// (one translation unit: a bump rebuilds nothing else).
#ifndef PKB_COMMON_HARNESS_VERSION_H_
#define PKB_COMMON_HARNESS_VERSION_H_

namespace pkb {

const char* HarnessVersion();

}  // namespace pkb

#endif  // PKB_COMMON_HARNESS_VERSION_H_
