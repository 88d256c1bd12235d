// The evaluation's compile (evaluation.h): sandboxed and cached, before the ranks start or while
// they do.
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/files.h"
#include "common/status_macros.h"
#include "worker/engine/compiler.h"
#include "worker/engine/evaluation.h"

namespace pkb {

CompilerOptions Evaluation::CompilerOptionsForJob() const {
  CompilerOptions co;
  co.gencode = o_.gencode;
  co.api_include_dir = o_.api_include_dir;
  co.torch_include_dir = o_.torch_include_dir;
  co.cpu_include_dirs = o_.cpu_include_dirs;
#ifdef PKB_MPI_INCLUDE_DIRS
  for (absl::string_view d : absl::StrSplit(PKB_MPI_INCLUDE_DIRS, ':')) {
    co.cpu_include_dirs.emplace_back(d);
  }
#endif
  co.cache_dir = o_.cache_dir;
  co.scratch_dir = scratch_;
  co.timeout = o_.compile_timeout;
  if (sandboxed_) co.sandbox = &sandbox_;
  return co;
}

std::string Evaluation::OwnCompileKey() {
  if (!own_compile_key_) {
    absl::StatusOr<std::string> key =
        o_.source.empty()
            ? std::string()
            : CandidateCompiler(CompilerOptionsForJob()).Key(o_.source, o_.source_name);
    own_compile_key_ = key.ok() ? *key : "";
  }
  return *own_compile_key_;
}

Evaluation::CompileOutcome Evaluation::CompileSource(bool place) const {
  CompileOutcome out;
  out.compiled = CandidateCompiler(CompilerOptionsForJob()).Compile(o_.source, o_.source_name);
  if (place && out.compiled.ok() && out.compiled->report.ok()) {
    out.placed = PlaceLibrary(out.compiled->library_path);
  }
  return out;
}

absl::Status Evaluation::PlaceLibrary(const std::string& compiled) const {
  std::error_code ec;
  if (absl::StartsWith(compiled, scratch_ + "/")) {
    std::filesystem::rename(compiled, CandidateLibrary(), ec);
  } else {
    std::filesystem::copy_file(compiled, CandidateLibrary(),
                               std::filesystem::copy_options::overwrite_existing, ec);
  }
  if (ec) return absl::InternalError("cannot place the compiled candidate: " + ec.message());
  return absl::OkStatus();
}

std::optional<Verdict> Evaluation::AdoptCompile(const CompileOutcome& c) {
  if (!c.compiled.ok()) return End(v1::INTERNAL, std::string(c.compiled.status().message()));
  *r_.mutable_compile() = c.compiled->report;
  (*r_.mutable_stage_seconds())["compile"] = c.compiled->report.seconds();
  if (!c.compiled->report.ok()) {
    int errors = 0;
    for (const auto& d : c.compiled->report.diagnostics()) errors += d.severity() == "error";
    return End(v1::COMPILE_ERROR,
               absl::StrCat("compilation failed with ", errors, " error(s)", errors ? ": " : "",
                            errors ? c.compiled->report.diagnostics(0).message() : ""));
  }
  if (!c.placed.ok()) return End(v1::INTERNAL, std::string(c.placed.message()));
  library_path_ = CandidateLibrary();
  return std::nullopt;
}

std::optional<Verdict> Evaluation::Compile() {
  if (!o_.baseline_only) {
    events_.Emit(v1::COMPILING, "compiling " + o_.source_name);
    // A compile-only run loads nothing: its library stays where the compiler left it.
    if (std::optional<Verdict> end = AdoptCompile(CompileSource(!o_.compile_only))) return end;
  }
  return AfterCompile();
}

std::optional<Verdict> Evaluation::AfterCompile() {
  if (o_.compile_only) return std::nullopt;  // Run ends with Compiled()
  if (backend_ == "cuda" && cpu_candidate_) {
    return End(v1::REJECTED, "a .cc candidate is a CPU test candidate; GPU runs need a .cu source");
  }
  if (backend_ == "cuda" && gpu_count_ == 0) {
    r_.set_gpu("none");
    return End(v1::NO_DEVICE,
               "compiled successfully, but this machine has no usable GPU: nothing was run, so "
               "there is no verdict on correctness or speed");
  }
  return std::nullopt;
}

void Evaluation::StartCompile() {
  events_.Emit(v1::COMPILING, "compiling " + o_.source_name);
  compile_thread_ = std::thread([this] {
    CompileOutcome c = CompileSource(/*place=*/true);
    const bool go = c.compiled.ok() && c.compiled->report.ok() && c.placed.ok();
    {
      // Done before the gate file exists: a launcher that still found the compile running
      // knows that no rank could have loaded the candidate yet (Judge).
      std::lock_guard<std::mutex> lock(compile_mu_);
      outcome_ = std::move(c);
      compiled_ = true;
    }
    absl::Status gate = WriteFileAtomic(CandidateGate(), go ? "go\n" : "abort\n");
    if (!gate.ok() && go) {
      // The ranks wait for a gate that never comes, until their limit: the job is INTERNAL.
      std::lock_guard<std::mutex> lock(compile_mu_);
      outcome_.placed = gate;
    }
  });
}

void Evaluation::JoinCompile() {
  if (compile_thread_.joinable()) compile_thread_.join();
}

bool Evaluation::CompileDone() {
  std::lock_guard<std::mutex> lock(compile_mu_);
  return compiled_;
}

bool Evaluation::CompileFailed() {
  std::lock_guard<std::mutex> lock(compile_mu_);
  return compiled_ &&
         !(outcome_.compiled.ok() && outcome_.compiled->report.ok() && outcome_.placed.ok());
}

Verdict Evaluation::Compiled() {
  int warnings = 0;
  for (const auto& d : r_.compile().diagnostics()) warnings += d.severity() == "warning";
  return End(
      v1::COMPILED,
      absl::StrFormat("compiled %s in %.2f s%s with %d warning(s); nothing was run "
                      "(compile only)",
                      o_.source_name, r_.compile().seconds(),
                      r_.compile().cache_hit() ? " (from the compile cache)" : "", warnings));
}

}  // namespace pkb
