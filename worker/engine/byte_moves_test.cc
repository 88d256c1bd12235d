#include "worker/engine/byte_moves.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <numeric>
#include <vector>

namespace pkb {
namespace {

// What a move means, one byte at a time: the model PackMoves and RunPackedOnHost must match.
void Naive(const ByteMove& m) {
  auto* dst = static_cast<uint8_t*>(m.dst);
  for (size_t i = 0; i < m.bytes; ++i) {
    dst[i] = m.src ? static_cast<const uint8_t*>(m.src)[i]
                   : static_cast<uint8_t>(m.pattern >> (8 * (i % m.element_bytes)));
  }
}

}  // namespace

TEST_CASE("byte moves: copies and fills of any size and offset match their byte-by-byte meaning",
          "[byte_moves]") {
  std::vector<uint8_t> src(5000);
  std::iota(src.begin(), src.end(), 7);
  std::vector<uint8_t> got(5000, 0x11), want(5000, 0x11);
  // Offsets off 16-byte boundaries, tails of every length, pieces cut at 48 bytes.
  auto moves_in = [&](uint8_t* base) {
    return std::vector<ByteMove>{
        {base + 0, src.data() + 0, 160},           // whole 16-byte units
        {base + 200, src.data() + 3, 101},         // neither end aligned
        {base + 400, nullptr, 77, 0x7FB2B2B2, 4},  // a float's poison, a tail of 13
        {base + 600, nullptr, 33, 0x7EB2, 2},      // a half's
        {base + 701, nullptr, 19, 0xA1, 1},        // bytes from an odd address
        {base + 800, nullptr, 1000, 0x7FF4B2B2B2B2B2B2ull, 8},
        {base + 1900, src.data() + 1900, 0},     // empty: dropped
        {base + 2000, src.data() + 2000, 2999},  // many pieces
    };
  };
  for (const ByteMove& m : moves_in(want.data())) Naive(m);
  auto packed = PackMoves(moves_in(got.data()), 48);
  REQUIRE(packed.ok());
  for (const PackedMove& p : *packed) {
    CHECK(p.bytes <= 48);
    CHECK(p.bytes > 0);
  }
  RunPackedOnHost(*packed);
  CHECK(std::memcmp(got.data(), want.data(), got.size()) == 0);
}

TEST_CASE("byte moves: the default pieces are at most kMoveChunkBytes and cut 16-byte aligned",
          "[byte_moves]") {
  std::vector<uint8_t> from(3 * kMoveChunkBytes + 5, 3), to(3 * kMoveChunkBytes + 5, 0);
  auto packed = PackMoves({{to.data(), from.data(), to.size()}});
  REQUIRE(packed.ok());
  REQUIRE(packed->size() == 4);
  for (size_t i = 0; i < packed->size(); ++i) {
    CHECK((*packed)[i].dst - reinterpret_cast<uint64_t>(to.data()) == i * kMoveChunkBytes);
    CHECK((*packed)[i].src - reinterpret_cast<uint64_t>(from.data()) == i * kMoveChunkBytes);
  }
  CHECK(packed->back().bytes == 5);
  RunPackedOnHost(*packed);
  CHECK(to == from);
}

TEST_CASE("byte moves: a fill of an element of 3 bytes or a move with no destination is refused",
          "[byte_moves]") {
  std::vector<uint8_t> to(64);
  auto odd = PackMoves({{to.data(), nullptr, 12, 0xABCDEF, 3}});
  REQUIRE_FALSE(odd.ok());
  CHECK(odd.status().message().find("element of 3 bytes") != std::string::npos);
  auto none = PackMoves({{nullptr, to.data(), 12}});
  REQUIRE_FALSE(none.ok());
  CHECK(none.status().message().find("no dst") != std::string::npos);
  CHECK_FALSE(PackMoves({{to.data(), to.data() + 32, 8}}, 24).ok());  // pieces off 16 bytes
}

}  // namespace pkb
