// Content hashes for cache and job keys (SHA-256, hex).
#ifndef PKB_COMMON_HASH_H_
#define PKB_COMMON_HASH_H_

#include <string>
#include <string_view>

namespace pkb {

std::string Sha256Hex(std::string_view data);

}  // namespace pkb

#endif  // PKB_COMMON_HASH_H_
