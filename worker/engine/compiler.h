// Compiling a submission into a shared object, with a content-addressed cache.
//
// The cache key covers the source, the flags, the compiler's own version and the candidate API
// headers, so a change of any of them compiles again. Diagnostics keep their file:line, with the
// scratch path replaced by the submission's name.
//
// A compile error the compiler named in the source is kept too (key.error, its log, for an hour):
// the same source fails the same way. A timeout, a signal, or a compiler that failed without
// naming an error in the source (a header of the node's, say) is not kept.
//
// Thread-safety: Compile() may run concurrently, in threads or processes; cache entries are
// published by rename. Compiles of one key take turns (flock of key.lock in the cache folder):
// the second finds the first's outcome in the cache.
#ifndef PKB_WORKER_ENGINE_COMPILER_H_
#define PKB_WORKER_ENGINE_COMPILER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pkb/v1/result.pb.h"
#include "worker/engine/sandbox.h"

namespace pkb {

struct CompilerOptions {
  std::string nvcc = "nvcc";
  std::string cxx = "g++";  // for CPU test candidates (.cc)
  std::string gencode = "arch=compute_90a,code=sm_90a";
  std::string api_include_dir;    // folder holding pkb/candidate.h
  std::string torch_include_dir;  // added when the source includes ATen or torch
  std::string cache_dir;          // empty: no cache
  std::string scratch_dir;        // where sources are written and compiled
  absl::Duration timeout = absl::Seconds(180);
  std::vector<std::string> extra_flags;
  std::vector<std::string> cpu_include_dirs;  // CPU test candidates: MPI's headers, fixtures
  // When set, the compiler runs in this sandbox (scratch: the compile's own folder) and sees only
  // the include folders above, the toolchain and /usr: an `#include` of anything else fails.
  // Include folders are resolved to their real paths (links followed) for the flags and the
  // sandbox alike; one that does not exist is an error naming it.
  const SandboxPolicy* sandbox = nullptr;
};

struct CompileOutput {
  v1::CompileReport report;
  std::string library_path;  // the .so, when report.ok()
};

class CandidateCompiler {
 public:
  explicit CandidateCompiler(CompilerOptions options);

  // `name` is the submission's file name as the author knows it ("kernel.cu"); a name ending
  // in .cc or .cpp is a CPU test candidate, compiled with the host compiler. An error status is
  // the service's failure (nvcc missing, disk full); a bad source is an OK status with
  // report.ok() false and diagnostics.
  absl::StatusOr<CompileOutput> Compile(const std::string& source, const std::string& name);

  // The cache key `source` compiles under (Sha256Hex of the source, the flags, the compiler's
  // version and the API headers), as Compile computes it.
  absl::StatusOr<std::string> Key(const std::string& source, const std::string& name);
  // Parses nvcc and gcc messages ("f.cu(12): error: ...", "f.cu:12:5: error: ...").
  static std::vector<v1::Diagnostic> ParseDiagnostics(const std::string& log,
                                                      const std::string& scratch_path,
                                                      const std::string& name);

 private:
  // What a compile of `source` runs, and its cache key.
  struct Prepared {
    bool cpu = false;
    std::string api_include, torch_include;
    std::vector<std::string> cpu_includes;
    std::string tool;
    std::vector<std::string> flags;
    std::string key;
  };
  absl::StatusOr<Prepared> Prepare(const std::string& source, const std::string& name);
  absl::StatusOr<std::string> ToolchainId(const std::string& tool);
  CompilerOptions options_;
};

}  // namespace pkb

#endif  // PKB_WORKER_ENGINE_COMPILER_H_
