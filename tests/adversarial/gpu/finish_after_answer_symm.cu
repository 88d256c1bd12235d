// Problem 1 at any W: finish_after_answer.cu's escape with a real all-reduce over symmetric
// memory (a device barrier, then every rank reads all peers' buffers). The first 5 calls (the
// verification trials) sum on the harness's stream; every later call only queues its sum for a
// host thread of its own, which launches it 5 ms later on a stream of its own, so the process
// answers the timed window before the work is done. Run with no picked copies (--spot-checks 0):
// what stops it is the judge's copy of the last call's outputs the moment the host answers.
// Expected verdict at every W, in a functional run on one GPU as in a run on W GPUs: MISMATCH,
// "when the host answered".
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "pkb/candidate.h"
#include "pkb/device.cuh"

PKB_CANDIDATE_API_V1;

namespace {

constexpr int kThreads = 512;
pkb_symm symm;
size_t symm_bytes = 0;

__global__ void allreduce(const __nv_bfloat16* in, __nv_bfloat16* out, pkb_symm s, int rank,
                          int world, int64_t n) {
  auto* local = static_cast<__nv_bfloat16*>(s.local);
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = first; i < n; i += stride) local[i] = in[i];
  pkb::barrier_block(s.signal_peers_dev, rank, world, blockIdx.x);
  for (int64_t i = first; i < n; i += stride) {
    float acc = 0.f;
    for (int p = 0; p < world; ++p) {
      acc += __bfloat162float(pkb::peer_ptr<const __nv_bfloat16>(s.peers_dev, p)[i]);
    }
    out[i] = __float2bfloat16(acc);
  }
  pkb::barrier_block(s.signal_peers_dev, rank, world, blockIdx.x);
}

struct Job {
  const __nv_bfloat16* in;
  __nv_bfloat16* out;
  int rank, world;
  int64_t n;
};

void Launch(const Job& j, cudaStream_t stream) {
  const int64_t want = (j.n + kThreads - 1) / kThreads;
  const int blocks = int(want < 1 ? 1 : (want > PKB_SIGNAL_CHANNELS ? PKB_SIGNAL_CHANNELS : want));
  allreduce<<<blocks, kThreads, 0, stream>>>(j.in, j.out, symm, j.rank, j.world, j.n);
}

std::mutex mu;
std::condition_variable cv;
std::deque<Job> queue;
bool stopping = false;
std::thread worker;
int calls = 0;

void Work() {
  cudaStream_t own;
  cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking);
  std::unique_lock<std::mutex> lock(mu);
  for (;;) {
    cv.wait(lock, [] { return stopping || !queue.empty(); });
    if (queue.empty()) return;
    Job j = queue.front();
    queue.pop_front();
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    Launch(j, own);
    cudaStreamSynchronize(own);
    lock.lock();
  }
}

}  // namespace

extern "C" int pkb_run(pkb_context* ctx, const pkb_tensor* in, int, const pkb_scalar*, int,
                       pkb_tensor* out, int) {
  const int64_t n = pkb_numel(&in[0]);
  const size_t bytes = size_t(n) * sizeof(__nv_bfloat16);
  if (bytes > symm_bytes) {  // the same shapes on every rank: collective on every rank
    if (ctx->symm_alloc(ctx, bytes, &symm) != 0) return 2;
    symm_bytes = bytes;
  }
  const Job job{static_cast<const __nv_bfloat16*>(in[0].data),
                static_cast<__nv_bfloat16*>(out[0].data), ctx->rank, ctx->world_size, n};
  if (++calls <= 5) {
    Launch(job, static_cast<cudaStream_t>(ctx->stream));
    return cudaGetLastError() == cudaSuccess ? 0 : 3;
  }
  std::lock_guard<std::mutex> lock(mu);
  if (!worker.joinable()) worker = std::thread(Work);
  queue.push_back(job);
  cv.notify_one();
  return 0;
}

extern "C" void pkb_fini(pkb_context*) {
  {
    std::lock_guard<std::mutex> lock(mu);
    stopping = true;
    cv.notify_one();
  }
  if (worker.joinable()) worker.join();
}
