// Content hashes for cache and job keys (SHA-256, hex), and the MAC that signs rank reports.
#ifndef PKB_COMMON_HASH_H_
#define PKB_COMMON_HASH_H_

#include <string>
#include <string_view>

namespace pkb {

std::string Sha256Hex(std::string_view data);

// HMAC-SHA-256 of `data` under `key`: 32 raw bytes.
std::string HmacSha256(std::string_view key, std::string_view data);

// Whether a and b hold the same bytes, in time that depends on their length only.
bool ConstantTimeEqual(std::string_view a, std::string_view b);

// `n` bytes from the operating system's cryptographic generator (empty if it fails).
std::string RandomBytes(size_t n);

}  // namespace pkb

#endif  // PKB_COMMON_HASH_H_
