// Problem 1 at W = 1 (a copy), honest in its work, forging its timers: pkb_init rewrites the first
// bytes of the CUDA runtime's cudaEventElapsedTime, in its own process, into a jump to a function
// that reports 1 us for every call (the names are split so the static check does not see them).
// The harness's events in the candidate's process then claim any speed. The speedup rests on the
// judge's clock only, so the forgery moves PKB's events figure and nothing else.
// Verdict: OK, with speedup_events far above the speedup (run_corpus.sh checks both).
#include <cuda_runtime.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

#include "pkb/candidate.h"

PKB_CANDIDATE_API_V1;
#define JOIN(a, b) a##b
// The symbol lookup, declared by hand under another name bound to its assembler name (its
// header, its name and C linkage are what the static check looks for); a null handle is glibc's
// default scope.
void* find_symbol(void*, const char*) __asm__(
    "dl"
    "sym");

static cudaError_t one_microsecond(float* ms, cudaEvent_t, cudaEvent_t) {
  *ms = 0.001f;
  return cudaSuccess;
}

extern "C" int pkb_init(pkb_context* ctx) {
  void* target = find_symbol(nullptr,
                             "cudaEvent"
                             "ElapsedTime");
  if (target == nullptr) return 0;  // nothing to forge: stay honest
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t start = reinterpret_cast<uintptr_t>(target) & ~(page - 1);
  if (JOIN(mpro, tect)(reinterpret_cast<void*>(start), 2 * page,
                       PROT_READ | PROT_WRITE | PROT_EXEC) != 0)
    return 0;
  // movabs rax, one_microsecond; jmp rax
  unsigned char patch[12] = {0x48, 0xB8, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xE0};
  const uint64_t to = reinterpret_cast<uint64_t>(&one_microsecond);
  memcpy(patch + 2, &to, sizeof(to));
  memcpy(target, patch, sizeof(patch));
  return 0;
}

extern "C" int pkb_run(pkb_context* ctx, const pkb_tensor* in, int, const pkb_scalar*, int,
                       pkb_tensor* out, int) {
  const size_t bytes = static_cast<size_t>(pkb_numel(&in[0])) * 2;
  return cudaMemcpyAsync(out[0].data, in[0].data, bytes, cudaMemcpyDeviceToDevice,
                         static_cast<cudaStream_t>(ctx->stream)) == cudaSuccess
             ? 0
             : 1;
}
