// pkb/device.cuh — device-side helpers for candidates: a cross-rank barrier over the symmetric
// signal pads, with bounded waits, and typed access to peer buffers.
//
// Every wait here spins at most `PKB_WAIT_TIMEOUT_CYCLES` clock cycles (about 2 s at 2 GHz by
// default). When it runs out, the waiting thread prints the rank, channel and peer it waited for
// and traps, so a deadlock becomes a RUNTIME_ERROR with a report instead of a hung job.
//
//   __global__ void my_allreduce(pkb_symm s, int rank, int world, ...) {
//     pkb::barrier_block(s.signal_peers_dev, rank, world, /*channel=*/blockIdx.x);
//     ... read peers ...
//     pkb::barrier_block(s.signal_peers_dev, rank, world, blockIdx.x);
//   }
//
// The barrier follows the put/wait-signal scheme of torch symmetric memory: rank r sets slot r of
// each peer's pad from 0 to 1, then waits for every peer's flag in its own pad and resets it to 0.
// It needs no epoch counter, so it can be called any number of times. Channels let independent
// blocks synchronize without interfering: each block uses its own channel (< PKB_SIGNAL_CHANNELS).
#ifndef PKB_DEVICE_CUH_
#define PKB_DEVICE_CUH_

#include <cstdint>
#include <cstdio>

#include "pkb/candidate.h"

#ifndef PKB_WAIT_TIMEOUT_CYCLES
#define PKB_WAIT_TIMEOUT_CYCLES (4000000000ll)
#endif

namespace pkb {

__device__ __forceinline__ uint32_t* signal_slot(uint32_t* pad, int channel, int peer) {
  return pad + channel * PKB_MAX_RANKS + peer;
}

// Sets `pad[channel][from]` from 0 to 1 on a peer's pad, waiting (bounded) if it is still set.
__device__ __forceinline__ void put_signal(uint32_t* peer_pad, int channel, int from, int to) {
  uint32_t* slot = signal_slot(peer_pad, channel, from);
  long long start = clock64();
  while (atomicCAS_system(slot, 0u, 1u) != 0u) {
    if (clock64() - start > PKB_WAIT_TIMEOUT_CYCLES) {
      printf("pkb: rank %d timed out signalling rank %d on channel %d (block %d)\n", from, to,
             channel, blockIdx.x);
      __trap();
    }
  }
}

// Waits (bounded) for `pad[channel][peer]` to be 1 on our own pad, then resets it to 0.
__device__ __forceinline__ void wait_signal(uint32_t* own_pad, int channel, int peer, int rank) {
  uint32_t* slot = signal_slot(own_pad, channel, peer);
  long long start = clock64();
  while (atomicCAS_system(slot, 1u, 0u) != 1u) {
    if (clock64() - start > PKB_WAIT_TIMEOUT_CYCLES) {
      printf("pkb: rank %d timed out waiting for rank %d on channel %d (block %d)\n", rank, peer,
             channel, blockIdx.x);
      __trap();
    }
  }
}

// Barrier across all ranks for the calling block (blockDim.x >= world). Memory written before
// it by the matching blocks of every rank is visible to this block after it.
__device__ __forceinline__ void barrier_block(uint32_t* const* signal_pads, int rank, int world,
                                              int channel) {
  __threadfence_system();  // publish this thread's writes before the block signals
  __syncthreads();
  if (threadIdx.x < world) {
    put_signal(signal_pads[threadIdx.x], channel, rank, threadIdx.x);
    wait_signal(signal_pads[rank], channel, threadIdx.x, rank);
    __threadfence_system();  // order the reads after the barrier behind the peers' signals
  }
  __syncthreads();
}

// Typed view of peer p's symmetric buffer.
template <typename T>
__device__ __forceinline__ T* peer_ptr(void* const* peers, int p) {
  return reinterpret_cast<T*>(peers[p]);
}

}  // namespace pkb

#endif  // PKB_DEVICE_CUH_
