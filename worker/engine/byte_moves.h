// The judge's own byte moves, batched: copies of contiguous ranges and fills of ranges with an
// element's bit pattern, run as one launch (RankDevice::StageMoves). Landing a timed round (its
// drawn inputs copied into the arena, every set's outputs poisoned) is thousands of small ATen ops
// otherwise, each with its own launch cost on the judge's thread: about 30 ms a round for problem
// 1's 2,000 sets on an H200 (docs/benchmarks.md), all of it inside the GPU watch.
//
//   std::vector<ByteMove> moves = {{dst, src, bytes}, {out, nullptr, out_bytes, bits, 4}};
//   std::vector<PackedMove> packed = *PackMoves(moves);   // the device's list
//   RunPackedOnHost(packed);                              // CPU devices (and the kernel's model)
#ifndef PKB_WORKER_ENGINE_BYTE_MOVES_H_
#define PKB_WORKER_ENGINE_BYTE_MOVES_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace pkb {

struct ByteMove {
  void* dst = nullptr;
  const void* src = nullptr;  // null: a fill with `pattern`
  size_t bytes = 0;
  uint64_t pattern = 0;   // a fill's element bits (little-endian), repeated every element_bytes
  int element_bytes = 1;  // 1, 2, 4 or 8
};

// One piece of a move as the device runs it: at most kMoveChunkBytes, starting a multiple of 16
// bytes into its move, a fill's pattern spread over 16 bytes (pattern[0] the first 8).
struct PackedMove {
  uint64_t dst = 0;
  uint64_t src = 0;  // 0: a fill
  uint64_t bytes = 0;
  uint64_t pattern[2] = {0, 0};
};
static_assert(sizeof(PackedMove) == 40, "the kernel reads the list as laid out here");

inline constexpr size_t kMoveChunkBytes = size_t{1} << 20;

// The moves cut into pieces (empty moves dropped). INVALID_ARGUMENT for a fill whose element is
// not 1, 2, 4 or 8 bytes, or a move with no destination.
absl::StatusOr<std::vector<PackedMove>> PackMoves(const std::vector<ByteMove>& moves,
                                                  size_t chunk_bytes = kMoveChunkBytes);

// What the kernel does, on the host: for devices whose memory is the host's.
void RunPackedOnHost(const std::vector<PackedMove>& packed);

// The kernel (byte_moves_kernel.cu, CUDA builds): LoadByteMoves loads it (a lazily loaded module
// would be loaded at its first launch, which may wait for the whole device: never under a watch);
// LaunchByteMoves runs `count` moves listed in device memory on `stream`. cudaError_t values.
int LoadByteMoves();
int LaunchByteMoves(void* stream, const PackedMove* device_list, int count);

}  // namespace pkb

#endif  // PKB_WORKER_ENGINE_BYTE_MOVES_H_
