#include "common/hash.h"

#include <openssl/evp.h>

#include "absl/strings/escaping.h"

namespace pkb {

std::string Sha256Hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), digest, &len, EVP_sha256(), nullptr);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(digest), len));
}

}  // namespace pkb
