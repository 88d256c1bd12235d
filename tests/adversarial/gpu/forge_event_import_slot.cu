// Problem 1 at W = 1 (a copy), honest in its work, forging its timers a second way: pkb_init
// leaves the CUDA runtime's code alone and rewrites the rank binary's own import slots (its GOT
// entries) for cudaEventElapsedTime, so that every event the harness reads in this process
// claims 1 us. Closing one door (the library's code) does not close this one; the speedup rests
// on the judge's clock only, so the forgery moves PKB's events figure and nothing else.
// Verdict: OK, with speedup_events far above the speedup (run_corpus.sh checks both).
#include <cuda_runtime.h>
#include <elf.h>
#include <link.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

#include "pkb/candidate.h"

PKB_CANDIDATE_API_V1;
#define JOIN(a, b) a##b

static cudaError_t one_microsecond(float* ms, cudaEvent_t, cudaEvent_t) {
  *ms = 0.001f;
  return cudaSuccess;
}

// glibc has already relocated the dynamic section's pointers; a table that still holds an
// offset is taken from the object's base.
static uintptr_t Absolute(const dl_phdr_info* info, uintptr_t p) {
  return p < info->dlpi_addr ? p + info->dlpi_addr : p;
}

// Every relocation of the main program (the rank binary) that names the function: its slot now
// holds one_microsecond. Counts the slots in *data.
static int PatchSlots(dl_phdr_info* info, size_t, void* data) {
  if (info->dlpi_name != nullptr && info->dlpi_name[0] != '\0') return 0;  // the program only
  const ElfW(Dyn)* dyn = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
      dyn = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
  }
  if (dyn == nullptr) return 1;
  const ElfW(Sym)* symbols = nullptr;
  const char* names = nullptr;
  const ElfW(Rela) * tables[2] = {nullptr, nullptr};
  size_t sizes[2] = {0, 0};
  for (const ElfW(Dyn)* d = dyn; d->d_tag != DT_NULL; ++d) {
    const uintptr_t p = Absolute(info, d->d_un.d_ptr);
    if (d->d_tag == DT_SYMTAB) symbols = reinterpret_cast<const ElfW(Sym)*>(p);
    if (d->d_tag == DT_STRTAB) names = reinterpret_cast<const char*>(p);
    if (d->d_tag == DT_JMPREL) tables[0] = reinterpret_cast<const ElfW(Rela)*>(p);
    if (d->d_tag == DT_PLTRELSZ) sizes[0] = d->d_un.d_val;
    if (d->d_tag == DT_RELA) tables[1] = reinterpret_cast<const ElfW(Rela)*>(p);
    if (d->d_tag == DT_RELASZ) sizes[1] = d->d_un.d_val;
  }
  if (symbols == nullptr || names == nullptr) return 1;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  for (int t = 0; t < 2; ++t) {
    for (size_t k = 0; tables[t] != nullptr && k < sizes[t] / sizeof(ElfW(Rela)); ++k) {
      const ElfW(Rela)& r = tables[t][k];
      const char* name = names + symbols[ELF64_R_SYM(r.r_info)].st_name;
      if (strcmp(name,
                 "cudaEvent"
                 "ElapsedTime") != 0)
        continue;
      void** slot = reinterpret_cast<void**>(info->dlpi_addr + r.r_offset);
      // Full RELRO left the slot read-only: make its page writable again.
      const uintptr_t start = reinterpret_cast<uintptr_t>(slot) & ~(page - 1);
      if (JOIN(mpro, tect)(reinterpret_cast<void*>(start), page, PROT_READ | PROT_WRITE) != 0)
        continue;
      *slot = reinterpret_cast<void*>(&one_microsecond);
      ++*static_cast<int*>(data);
    }
  }
  return 1;
}

extern "C" int pkb_init(pkb_context* ctx) {
  int patched = 0;
  dl_iterate_phdr(&PatchSlots, &patched);
  if (ctx->log != nullptr)
    ctx->log(ctx, patched > 0 ? "import slots rewritten" : "no import slot found: staying honest");
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
