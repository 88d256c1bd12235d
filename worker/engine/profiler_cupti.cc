// ProfileCall on GPUs: CUPTI's activity API, loaded at run time.
#include <cupti.h>
#include <cuda_runtime.h>
#include <cxxabi.h>
#include <dlfcn.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/engine/profiler.h"

namespace pkb {
namespace {

// The few CUPTI entry points the pass uses, from libcupti.so.13.
struct Cupti {
  CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc,
                                    CUpti_BuffersCallbackCompleteFunc) = nullptr;
  CUptiResult (*enable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*disable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*flush_all)(uint32_t) = nullptr;
  CUptiResult (*next_record)(uint8_t*, size_t, CUpti_Activity**) = nullptr;
  CUptiResult (*dropped)(CUcontext, uint32_t, size_t*) = nullptr;
  std::string error;  // why it is not there
};

// Where to look: the loader's path, then beside the CUDA runtime this process uses (the torch
// wheel's CUDA libraries keep CUPTI there), then the toolkit's own places.
void* OpenCupti(std::string* tried) {
  std::vector<std::string> names = {"libcupti.so.13"};
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cudaGetDevice), &info) != 0 && info.dli_fname != nullptr) {
    std::string dir = info.dli_fname;
    dir = dir.substr(0, dir.rfind('/') + 1);
    if (!dir.empty()) names.push_back(dir + "libcupti.so.13");
  }
  names.push_back("/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13");
  names.push_back("/usr/local/cuda/lib64/libcupti.so.13");
  for (const std::string& n : names) {
    if (void* h = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    absl::StrAppend(tried, tried->empty() ? "" : ", ", n);
  }
  return nullptr;
}

Cupti& TheCupti() {
  static Cupti* api = [] {
    auto* c = new Cupti();
    std::string tried;
    void* h = OpenCupti(&tried);
    if (h == nullptr) {
      c->error = absl::StrCat("CUPTI not found (tried ", tried, ")");
      return c;
    }
    auto sym = [&](const char* name) { return dlsym(h, name); };
    c->register_callbacks = reinterpret_cast<decltype(c->register_callbacks)>(
        sym("cuptiActivityRegisterCallbacks"));
    c->enable = reinterpret_cast<decltype(c->enable)>(sym("cuptiActivityEnable"));
    c->disable = reinterpret_cast<decltype(c->disable)>(sym("cuptiActivityDisable"));
    c->flush_all = reinterpret_cast<decltype(c->flush_all)>(sym("cuptiActivityFlushAll"));
    c->next_record =
        reinterpret_cast<decltype(c->next_record)>(sym("cuptiActivityGetNextRecord"));
    c->dropped =
        reinterpret_cast<decltype(c->dropped)>(sym("cuptiActivityGetNumDroppedRecords"));
    if (!c->register_callbacks || !c->enable || !c->disable || !c->flush_all ||
        !c->next_record || !c->dropped) {
      c->error = "CUPTI lacks the activity API";
    }
    return c;
  }();
  return *api;
}

// What the buffer callbacks collected (CUPTI may call them from its own thread).
std::mutex collected_mu;
std::vector<RawActivity>* collected = nullptr;
int64_t collected_lost = 0;

constexpr size_t kBufferBytes = 4 << 20;

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

std::string Demangled(const char* name) {
  if (name == nullptr) return "?";
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(name, nullptr, nullptr, &status),
                                           std::free);
  return status == 0 && d ? std::string(d.get()) : std::string(name);
}

// Copy kinds (CUpti_ActivityMemcpyKind) as the profile names them.
const char* CopyName(uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return TransferName(Transfer::kHostToDevice);
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return TransferName(Transfer::kDeviceToHost);
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return TransferName(Transfer::kDeviceToDevice);
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return TransferName(Transfer::kPeerToPeer);
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return TransferName(Transfer::kHostToHost);
    default: return TransferName(Transfer::kOtherCopy);
  }
}

// A copy or memset record (the three record types share these fields).
template <typename Record>
RawActivity TransferOf(const CUpti_Activity* rec, v1::ProfileRecord::Kind kind, const char* name) {
  const auto* m = reinterpret_cast<const Record*>(rec);
  RawActivity a;
  a.kind = kind;
  a.name = name;
  a.start_ns = m->start;
  a.end_ns = m->end;
  a.bytes = static_cast<int64_t>(m->bytes);
  a.stream = m->streamId;
  return a;
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  Cupti& api = TheCupti();
  std::lock_guard<std::mutex> lock(collected_mu);
  CUpti_Activity* rec = nullptr;
  while (collected != nullptr && api.next_record(buffer, valid, &rec) == CUPTI_SUCCESS) {
    RawActivity a;
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        // Newer CUPTI versions only append fields: the ones read here keep their places.
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
        a.kind = v1::ProfileRecord::KERNEL;
        a.name = Demangled(k->name);
        a.start_ns = k->start;
        a.end_ns = k->end;
        a.grid[0] = k->gridX, a.grid[1] = k->gridY, a.grid[2] = k->gridZ;
        a.block[0] = k->blockX, a.block[1] = k->blockY, a.block[2] = k->blockZ;
        a.stream = k->streamId;
        a.registers_per_thread = k->registersPerThread;
        a.shared_memory_bytes = k->staticSharedMemory + k->dynamicSharedMemory;
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY:
        a = TransferOf<CUpti_ActivityMemcpy6>(
            rec, v1::ProfileRecord::MEMCPY,
            CopyName(reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec)->copyKind));
        break;
      case CUPTI_ACTIVITY_KIND_MEMCPY2:
        a = TransferOf<CUpti_ActivityMemcpyPtoP4>(rec, v1::ProfileRecord::MEMCPY,
                                                  TransferName(Transfer::kPeerToPeer));
        break;
      case CUPTI_ACTIVITY_KIND_MEMSET:
        a = TransferOf<CUpti_ActivityMemset4>(rec, v1::ProfileRecord::MEMSET,
                                              TransferName(Transfer::kMemset));
        break;
      default:
        continue;
    }
    collected->push_back(std::move(a));
  }
  size_t dropped = 0;
  if (api.dropped(nullptr, 0, &dropped) == CUPTI_SUCCESS) collected_lost += dropped;
  std::free(buffer);
}

constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                         CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMCPY2,
                                         CUPTI_ACTIVITY_KIND_MEMSET};

}  // namespace

absl::StatusOr<v1::CallProfile> ProfileCall(const std::function<absl::Status()>& body,
                                            const std::function<absl::Status()>& sync) {
  Cupti& api = TheCupti();
  v1::CallProfile none;
  if (!api.error.empty()) {
    PKB_RETURN_IF_ERROR(body());
    PKB_RETURN_IF_ERROR(sync());
    none.set_note(absl::StrCat("no GPU profile: ", api.error));
    return none;
  }
  static const CUptiResult registered = api.register_callbacks(BufferRequested, BufferCompleted);
  // Work enqueued before the pass is not the call's.
  PKB_RETURN_IF_ERROR(sync());
  std::vector<RawActivity> records;
  {
    std::lock_guard<std::mutex> lock(collected_mu);
    collected = &records;
    collected_lost = 0;
  }
  CUptiResult enabled = registered;
  for (CUpti_ActivityKind k : kKinds) {
    if (enabled == CUPTI_SUCCESS) enabled = api.enable(k);
  }
  absl::Status ran = body();
  if (ran.ok()) ran = sync();
  api.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  for (CUpti_ActivityKind k : kKinds) api.disable(k);
  api.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  int64_t lost = 0;
  {
    std::lock_guard<std::mutex> lock(collected_mu);
    collected = nullptr;
    lost = collected_lost;
  }
  PKB_RETURN_IF_ERROR(ran);
  if (enabled != CUPTI_SUCCESS) {
    none.set_note(absl::StrCat("no GPU profile: CUPTI refused the activity API (error ",
                               static_cast<int>(enabled), ")"));
    return none;
  }
  return SummarizeActivity(std::move(records), lost);
}

}  // namespace pkb
