#include "worker/engine/byte_moves.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace pkb {

absl::StatusOr<std::vector<PackedMove>> PackMoves(const std::vector<ByteMove>& moves,
                                                  size_t chunk_bytes) {
  if (chunk_bytes == 0 || chunk_bytes % 16 != 0)
    return absl::InvalidArgumentError(absl::StrCat("chunk of ", chunk_bytes, " bytes"));
  std::vector<PackedMove> packed;
  for (size_t m = 0; m < moves.size(); ++m) {
    const ByteMove& mv = moves[m];
    if (mv.bytes == 0) continue;
    if (mv.dst == nullptr) return absl::InvalidArgumentError(absl::StrCat("move ", m, ": no dst"));
    const int e = mv.element_bytes;
    if (mv.src == nullptr && e != 1 && e != 2 && e != 4 && e != 8) {
      return absl::InvalidArgumentError(
          absl::StrCat("move ", m, ": a fill's element of ", e, " bytes (1, 2, 4 or 8)"));
    }
    uint8_t spread[16];
    for (int i = 0; i < 16; ++i) spread[i] = static_cast<uint8_t>(mv.pattern >> (8 * (i % e)));
    PackedMove piece;
    std::memcpy(piece.pattern, spread, sizeof spread);
    for (size_t off = 0; off < mv.bytes; off += chunk_bytes) {
      piece.dst = reinterpret_cast<uint64_t>(mv.dst) + off;
      piece.src = mv.src ? reinterpret_cast<uint64_t>(mv.src) + off : 0;
      piece.bytes = std::min(chunk_bytes, mv.bytes - off);
      packed.push_back(piece);
    }
  }
  return packed;
}

void RunPackedOnHost(const std::vector<PackedMove>& packed) {
  for (const PackedMove& p : packed) {
    auto* dst = reinterpret_cast<uint8_t*>(p.dst);
    if (p.src) {
      std::memcpy(dst, reinterpret_cast<const uint8_t*>(p.src), p.bytes);
      continue;
    }
    const size_t whole = p.bytes / 16 * 16;
    for (size_t i = 0; i < whole; i += 16) std::memcpy(dst + i, p.pattern, 16);
    std::memcpy(dst + whole, p.pattern, p.bytes - whole);
  }
}

}  // namespace pkb
