/*
 * pkb/candidate.h — the ParallelKernelBench candidate API, version 1.
 *
 * A submission is one CUDA C++ source file compiled into a shared object and loaded by every
 * rank process of an evaluation (one process per GPU, as with torchrun). It includes this header
 * and exports `pkb_run`; `pkb_init` is optional. The header needs no torch and
 * no CUDA headers, so a submission that includes only this and <cuda_runtime.h> compiles in
 * about a second. `pkb/device.cuh` adds the device-side barrier and peer helpers;
 * `pkb/aten_core.h` wraps tensors as at::Tensor for submissions that use ATen as glue
 * (`pkb/aten.h`: the same with all of ATen).
 *
 *   #include <pkb/candidate.h>
 *   PKB_CANDIDATE_API_V1;
 *
 *   extern "C" int pkb_run(pkb_context* ctx, const pkb_tensor* in, int n_in,
 *                          const pkb_scalar* args, int n_args, pkb_tensor* out, int n_out) {
 *     // read in[i], write every element of out[j] on ctx->stream; return 0 on success.
 *   }
 *
 * Contract (docs/candidate-api.md says it at length):
 *  - Inputs come in the reference's call order; outputs are allocated by the harness with the
 *    exact shapes and dtypes of the reference's results and filled with a poison pattern before
 *    each call: write every element. Do not modify inputs. Do not keep pointers to inputs or
 *    outputs across calls (they rotate between calls).
 *  - Enqueue all device work on ctx->stream (or make ctx->stream wait for it before returning).
 *    Your time is the judge's wall clock over the timed calls (host launch time included), which
 *    runs until your process's device is idle: work left on other streams counts, and outputs
 *    that land after that are missing when the judge copies them (MISMATCH). Timers in your
 *    process (CUDA events) are shown, never scored.
 *  - `pkb_init` runs once per process before the first call, on every rank at the same time: it
 *    is where collective set-up belongs (symmetric memory, sub-communicators).
 *  - A non-zero return fails the run with a RUNTIME_ERROR; ctx->set_error gives it a message.
 *  - Thread safety: the harness calls the candidate from one host thread per rank process.
 */
#ifndef PKB_CANDIDATE_H_
#define PKB_CANDIDATE_H_

#include <stddef.h>
#include <stdint.h>

#define PKB_API_VERSION 1

#ifdef __cplusplus
extern "C" {
#endif

/* Element types. Values are part of the ABI. */
typedef enum pkb_dtype {
  PKB_BFLOAT16 = 0,
  PKB_FLOAT16 = 1,
  PKB_FLOAT32 = 2,
  PKB_FLOAT64 = 3,
  PKB_INT64 = 4,
  PKB_INT32 = 5,
  PKB_UINT8 = 6,
  PKB_INT8 = 7,
  PKB_BOOL = 8,
  PKB_FLOAT8_E4M3 = 9,
  PKB_FLOAT8_E5M2 = 10,
  PKB_COMPLEX64 = 11,
} pkb_dtype;

typedef enum pkb_device_type { PKB_CPU = 0, PKB_CUDA = 1 } pkb_device_type;

#define PKB_MAX_DIMS 8

/* A strided view of memory on the rank's device. Strides are in elements. */
typedef struct pkb_tensor {
  void* data;
  int32_t dtype;  /* pkb_dtype */
  int32_t ndim;
  int64_t shape[PKB_MAX_DIMS];
  int64_t strides[PKB_MAX_DIMS];
  int32_t device_type;  /* pkb_device_type */
  int32_t device_index;
} pkb_tensor;

/* A non-tensor argument of the reference (a Python number there). */
typedef enum pkb_scalar_kind { PKB_SCALAR_INT = 0, PKB_SCALAR_FLOAT = 1 } pkb_scalar_kind;
typedef struct pkb_scalar {
  const char* name;
  int32_t kind; /* pkb_scalar_kind */
  int64_t i;
  double f;
} pkb_scalar;

/* A process group of the problem (always at least "world"). */
typedef struct pkb_group {
  const char* name;
  int32_t rank; /* this process's rank inside the group */
  int32_t size;
  const int32_t* ranks; /* global ranks, in group-rank order */
  void* nccl_comm;      /* ncclComm_t over this group's ranks (NULL on CPU) */
} pkb_group;

/* Slots of each rank's signal pad, per channel. See pkb/device.cuh. */
#define PKB_MAX_RANKS 64
#define PKB_SIGNAL_CHANNELS 256

/*
 * Symmetric memory: a collective allocation of the same size on every rank. `peers[i]` is rank
 * i's buffer mapped into this process (CUDA IPC), `peers[rank] == local`. Every rank also gets a
 * zeroed signal pad of PKB_SIGNAL_CHANNELS * PKB_MAX_RANKS uint32 slots, mapped likewise, for the
 * device barrier. Memory lives until the process ends; allocate once, in pkb_init.
 */
typedef struct pkb_symm {
  void* local;
  void* const* peers;
  size_t bytes;
  uint32_t* signal_local;
  uint32_t* const* signal_peers;
  /* Device-resident copies of the two pointer tables, for kernels. */
  void* const* peers_dev;
  uint32_t* const* signal_peers_dev;
} pkb_symm;

typedef struct pkb_context pkb_context;
struct pkb_context {
  uint32_t api_version; /* PKB_API_VERSION of the harness */
  int32_t rank;
  int32_t world_size;
  int32_t device_type; /* pkb_device_type: PKB_CUDA on GPU nodes */
  int32_t device_index;
  void* stream;    /* cudaStream_t: enqueue all work here */
  void* nccl_comm; /* ncclComm_t over WORLD (same as groups[0].nccl_comm) */
  int32_t num_groups;
  const pkb_group* groups; /* groups[0] is "world"; the rest are the problem's sub-groups */

  /* Collective: every rank must call it with the same size, in the same order. Returns 0 or an
   * error code; on error ctx has a message. */
  int (*symm_alloc)(pkb_context* ctx, size_t bytes, pkb_symm* out);
  /* Collective host barrier across all ranks (does not synchronize the device). */
  int (*host_barrier)(pkb_context* ctx);
  /* Record an error message for a failing return. */
  void (*set_error)(pkb_context* ctx, const char* message);
  /* Write a line into the job's log (rate-limited and truncated by the harness). */
  void (*log)(pkb_context* ctx, const char* message);
  /* Look up a group by name; NULL if the problem has none of that name. */
  const pkb_group* (*group)(pkb_context* ctx, const char* name);

  void* harness; /* opaque to the candidate */
};

/* Entry points a candidate exports. */
typedef int (*pkb_init_fn)(pkb_context* ctx);
typedef int (*pkb_run_fn)(pkb_context* ctx, const pkb_tensor* inputs, int num_inputs,
                          const pkb_scalar* args, int num_args, pkb_tensor* outputs,
                          int num_outputs);
/* Accepted for source compatibility, never called: the harness kills the candidate's process
 * at the end of a run, and nothing may be left for a pkb_fini to finish. */
typedef void (*pkb_fini_fn)(pkb_context* ctx);

#ifdef __cplusplus
}
#endif

/* Every candidate states the API version it was written for, once, at file scope. */
#ifdef __cplusplus
#define PKB_CANDIDATE_API_V1 \
  extern "C" __attribute__((visibility("default"))) const uint32_t pkb_candidate_api_version = 1
#else
#define PKB_CANDIDATE_API_V1 \
  __attribute__((visibility("default"))) const uint32_t pkb_candidate_api_version = 1
#endif

/* Small helpers, usable in host code of candidates. */
#ifdef __cplusplus
static inline int64_t pkb_numel(const pkb_tensor* t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; ++i) n *= t->shape[i];
  return n;
}
static inline size_t pkb_dtype_size(int32_t dtype) {
  switch (dtype) {
    case PKB_BFLOAT16: case PKB_FLOAT16: return 2;
    case PKB_FLOAT32: case PKB_INT32: return 4;
    case PKB_FLOAT64: case PKB_INT64: case PKB_COMPLEX64: return 8;
    default: return 1;
  }
}
static inline int pkb_is_contiguous(const pkb_tensor* t) {
  int64_t expected = 1;
  for (int i = t->ndim - 1; i >= 0; --i) {
    if (t->shape[i] != 1 && t->strides[i] != expected) return 0;
    expected *= t->shape[i];
  }
  return 1;
}
static inline const pkb_scalar* pkb_find_arg(const pkb_scalar* args, int n, const char* name) {
  for (int i = 0; i < n; ++i) {
    const char* a = args[i].name;
    const char* b = name;
    while (*a && *a == *b) { ++a; ++b; }
    if (*a == 0 && *b == 0) return &args[i];
  }
  return 0;
}
#endif

#endif /* PKB_CANDIDATE_H_ */
