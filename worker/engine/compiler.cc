#include "worker/engine/compiler.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <map>
#include <mutex>
#include <regex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/files.h"
#include "common/hash.h"
#include "common/status_macros.h"
#include "common/subprocess.h"
#include "worker/engine/node_compiles.h"

namespace pkb {

namespace {

// Stands for the submission's file name in a log the cache keeps.
constexpr char kSourceToken[] = "@PKB_SOURCE@";

// How long a kept compile error answers for its source: long enough for a job compiled ahead and
// a resubmission, short enough that an error of the node's own (a toolchain or a sandbox mount
// fixed since) does not outlive its fix by much.
constexpr absl::Duration kKeptErrorLife = absl::Hours(1);

// Whether `path` is a file written less than `life` ago.
bool WrittenWithin(const std::string& path, absl::Duration life) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return false;
  return absl::Now() - absl::FromTimeT(st.st_mtime) < life;
}

// An exclusive flock(2) of one cache key's lock file, held until destroyed (or the process
// ends). Without a lock file (an unwritable cache folder, a link planted there) nothing is held:
// the two compiles then both run, as they would without a cache; likewise past `limit` (a holder
// that stopped without dying).
class KeyLock {
 public:
  KeyLock() = default;
  KeyLock(const KeyLock&) = delete;
  KeyLock& operator=(const KeyLock&) = delete;
  ~KeyLock() {
    if (fd_ >= 0) close(fd_);  // releases the lock
  }
  void Lock(const std::string& path, absl::Duration limit) {
    fd_ = open(path.c_str(), O_RDONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd_ < 0) return;
    const absl::Time give_up = absl::Now() + limit;
    while (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      if ((errno != EWOULDBLOCK && errno != EINTR) || absl::Now() >= give_up) {
        close(fd_);
        fd_ = -1;
        return;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }

 private:
  int fd_ = -1;
};

// The installation a compiler belongs to (/opt/cuda for /opt/cuda/bin/nvcc): it must be visible in
// the sandbox. Empty when it is not found or lies under /usr, which is always visible.
std::string ToolRoot(const std::string& tool) {
  namespace fs = std::filesystem;
  fs::path path = tool;
  if (tool.find('/') == std::string::npos) {
    const char* env_path = getenv("PATH");
    path.clear();
    for (absl::string_view d : absl::StrSplit(env_path ? env_path : "", ':')) {
      fs::path candidate = fs::path(std::string(d)) / tool;
      if (!d.empty() && fs::exists(candidate)) {
        path = candidate;
        break;
      }
    }
  }
  std::error_code ec;
  fs::path real = fs::canonical(path, ec);
  if (path.empty() || ec) return "";
  std::string root = real.parent_path().parent_path().string();
  return absl::StartsWith(root, "/usr") || root == "/" ? "" : root;
}

// The real path of an include folder. The sandbox binds real paths (sandbox.h), so the compiler
// is given the same: a folder reached through a symbolic link would otherwise not exist in it.
absl::StatusOr<std::string> RealFolder(const std::string& dir, const char* what) {
  std::error_code ec;
  std::filesystem::path real = dir.empty() ? "" : std::filesystem::canonical(dir, ec);
  if (dir.empty() || ec || !std::filesystem::is_directory(real, ec)) {
    return absl::FailedPreconditionError(
        absl::StrCat("the ", what, " folder '", dir, "' does not exist",
                     ec ? absl::StrCat(" (", ec.message(), ")") : ""));
  }
  return real.string();
}

// What the sandbox must show for `real_dir` to work as an include folder: the folder and the
// targets of the links in it (cmake/PkbTorch.cmake's torch_include is a folder of links into the
// torch wheel).
std::vector<std::string> IncludeMounts(const std::string& real_dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> mounts = {real_dir};
  std::error_code ec;
  for (fs::directory_iterator it(real_dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code link_ec;
    if (!it->is_symlink(link_ec)) continue;
    fs::path target = fs::canonical(it->path(), link_ec);
    if (!link_ec) mounts.push_back(target.string());
  }
  return mounts;
}

}  // namespace

CandidateCompiler::CandidateCompiler(CompilerOptions options) : options_(std::move(options)) {}

absl::StatusOr<std::string> CandidateCompiler::ToolchainId(const std::string& tool) {
  static std::mutex mu;
  static std::map<std::string, std::string> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(tool);
  if (it != cache.end()) return it->second;
  SubprocessOptions o;
  o.argv = {tool, "--version"};
  o.timeout = absl::Seconds(30);
  auto r = RunSubprocess(o);
  if (!r.ok() || r->exit_code != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("compiler '", tool, "' is not usable on this node"));
  }
  cache[tool] = r->out;
  return r->out;
}

std::vector<v1::Diagnostic> CandidateCompiler::ParseDiagnostics(const std::string& log,
                                                                const std::string& scratch_path,
                                                                const std::string& name) {
  static const std::regex nvcc_re(R"(^(.*)\((\d+)\): (error|warning|remark)[^:]*: (.*)$)");
  static const std::regex gcc_re(R"(^(.*?):(\d+):(\d+): (fatal error|error|warning|note): (.*)$)");
  std::vector<v1::Diagnostic> out;
  for (absl::string_view line_view : absl::StrSplit(log, '\n')) {
    std::string line(line_view);
    std::smatch m;
    v1::Diagnostic d;
    if (std::regex_match(line, m, nvcc_re)) {
      d.set_file(m[1]);
      d.set_line(std::stoi(m[2]));
      d.set_severity(m[3]);
      d.set_message(m[4]);
    } else if (std::regex_match(line, m, gcc_re)) {
      d.set_file(m[1]);
      d.set_line(std::stoi(m[2]));
      d.set_column(std::stoi(m[3]));
      d.set_severity(m[4] == "fatal error" ? "error" : std::string(m[4]));
      d.set_message(m[5]);
    } else {
      continue;
    }
    if (d.file() == scratch_path) d.set_file(name);
    out.push_back(d);
  }
  return out;
}

absl::StatusOr<CandidateCompiler::Prepared> CandidateCompiler::Prepare(const std::string& source,
                                                                       const std::string& name) {
  Prepared p;
  p.cpu = absl::EndsWith(name, ".cc") || absl::EndsWith(name, ".cpp");
  bool uses_torch = absl::StrContains(source, "<ATen/") || absl::StrContains(source, "<torch/") ||
                    absl::StrContains(source, "pkb/aten.h") ||
                    absl::StrContains(source, "pkb/aten_core.h");
  PKB_ASSIGN_OR_RETURN(p.api_include,
                       RealFolder(options_.api_include_dir, "candidate API include"));
  if (uses_torch && !options_.torch_include_dir.empty()) {
    PKB_ASSIGN_OR_RETURN(p.torch_include, RealFolder(options_.torch_include_dir, "torch include"));
  }
  if (p.cpu) {
    for (const auto& d : options_.cpu_include_dirs) {
      PKB_ASSIGN_OR_RETURN(std::string real, RealFolder(d, "include"));
      p.cpu_includes.push_back(std::move(real));
    }
    p.tool = options_.cxx;
    p.flags = {"-O2", "-std=c++17", "-shared", "-fPIC"};
    for (const auto& d : p.cpu_includes) p.flags.push_back("-I" + d);
  } else {
    p.tool = options_.nvcc;
    p.flags = {"-O3",        "-std=c++17", "-shared",
               "-Xcompiler", "-fPIC",      "-cudart",
               "shared",     "-lineinfo",  absl::StrCat("-gencode=", options_.gencode)};
  }
  p.flags.push_back("-I" + p.api_include);
  if (!p.torch_include.empty()) {
    p.flags.push_back("-I" + p.torch_include);
    p.flags.push_back("-I" + p.torch_include + "/torch/csrc/api/include");
    p.flags.push_back("-D_GLIBCXX_USE_CXX11_ABI=1");
  }
  for (const auto& f : options_.extra_flags) p.flags.push_back(f);

  PKB_ASSIGN_OR_RETURN(std::string toolchain, ToolchainId(p.tool));
  // Every header of the candidate API is part of the key (candidate.h must be there; a folder
  // without the others keys on their absence).
  PKB_ASSIGN_OR_RETURN(std::string api_headers, ReadFile(p.api_include + "/pkb/candidate.h"));
  for (const char* h : {"device.cuh", "aten_core.h", "aten.h"}) {
    auto text = ReadFile(absl::StrCat(p.api_include, "/pkb/", h));
    absl::StrAppend(&api_headers, "\n--", h, "--\n", text.ok() ? *text : "");
  }
  p.key = Sha256Hex(absl::StrCat(source, "\n--flags--\n", absl::StrJoin(p.flags, " "),
                                 "\n--toolchain--\n", toolchain, "\n--api--\n", api_headers,
                                 "\n--name--\n", p.cpu));
  return p;
}

absl::StatusOr<std::string> CandidateCompiler::Key(const std::string& source,
                                                   const std::string& name) {
  PKB_ASSIGN_OR_RETURN(Prepared p, Prepare(source, name));
  return p.key;
}

absl::StatusOr<CompileOutput> CandidateCompiler::Compile(const std::string& source,
                                                         const std::string& name) {
  absl::Time start = absl::Now();
  PKB_ASSIGN_OR_RETURN(Prepared prepared, Prepare(source, name));
  const bool cpu = prepared.cpu;
  const std::string& api_include = prepared.api_include;
  const std::string& torch_include = prepared.torch_include;
  const std::vector<std::string>& cpu_includes = prepared.cpu_includes;
  const std::string& tool = prepared.tool;
  const std::vector<std::string>& flags = prepared.flags;
  const std::string& key = prepared.key;
  CompileOutput out;
  out.report.set_command(
      absl::StrCat(tool, " ", absl::StrJoin(flags, " "), " -o candidate.so ", name));
  std::string cached_so, cached_log, cached_error;
  KeyLock key_lock;
  if (!options_.cache_dir.empty()) {
    cached_so = absl::StrCat(options_.cache_dir, "/", key, ".so");
    cached_log = absl::StrCat(options_.cache_dir, "/", key, ".log");
    cached_error = absl::StrCat(options_.cache_dir, "/", key, ".error");
    std::error_code ec;
    std::filesystem::create_directories(options_.cache_dir, ec);
    // One compile of a key at a time on this node: a second one (a job whose source the worker
    // is compiling ahead of it) waits for the first and takes its outcome from the cache.
    key_lock.Lock(absl::StrCat(options_.cache_dir, "/", key, ".lock"), options_.timeout);
    const bool built = std::filesystem::exists(cached_so);
    if (built || WrittenWithin(cached_error, kKeptErrorLife)) {
      out.report.set_ok(built);
      out.report.set_cache_hit(true);
      auto kept = ReadFile(built ? cached_log : cached_error);
      if (kept.ok()) {
        // In this submission's name, whatever the name of the one that compiled it.
        const std::string log = absl::StrReplaceAll(*kept, {{kSourceToken, name}});
        out.report.set_log(log);
        for (auto& d : ParseDiagnostics(log, "", name)) *out.report.add_diagnostics() = d;
      }
      if (built) out.library_path = cached_so;
      out.report.set_seconds(absl::ToDoubleSeconds(absl::Now() - start));
      return out;
    }
  }

  PKB_ASSIGN_OR_RETURN(std::string dir, MakeTempDir(options_.scratch_dir, "compile-"));
  std::string src_path = absl::StrCat(dir, "/", cpu ? "candidate.cc" : "candidate.cu");
  std::string so_path = absl::StrCat(dir, "/candidate.so");
  PKB_RETURN_IF_ERROR(WriteFileAtomic(src_path, source));
  SubprocessOptions o;
  o.argv = {tool};
  for (const auto& f : flags) o.argv.push_back(f);
  o.argv.push_back("-o");
  o.argv.push_back(so_path);
  o.argv.push_back(src_path);
  o.timeout = options_.timeout;
  o.merge_stderr = true;
  o.max_output_bytes = 64 * 1024;
  o.cwd = dir;
  if (options_.sandbox) {
    SandboxPolicy policy = *options_.sandbox;
    policy.scratch = dir;
    policy.gpu = false;
    policy.read_only = {api_include};
    if (!torch_include.empty()) {
      for (auto& d : IncludeMounts(torch_include)) policy.read_only.push_back(std::move(d));
    }
    for (const auto& d : cpu_includes) policy.read_only.push_back(d);
    std::string root = ToolRoot(tool);
    if (!root.empty()) policy.read_only.push_back(root);
    PKB_ASSIGN_OR_RETURN(o.argv, SandboxCommand(policy, o.argv));
    o.clear_env = true;
    for (const auto& kv : SandboxEnvironment(dir)) {
      size_t eq = kv.find('=');
      o.env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
  }
  // The node's other evaluations learn that a compiler ran beside them (node_compiles.h).
  std::unique_ptr<NodeCompiles::Run> node_entry;
  if (!options_.cache_dir.empty()) {
    node_entry = NodeCompiles(options_.cache_dir + "/compiles").Begin(key);
  }
  PKB_ASSIGN_OR_RETURN(SubprocessResult r, RunSubprocess(o));
  node_entry.reset();
  std::string log = absl::StrReplaceAll(r.out, {{src_path, name}, {dir + "/", ""}});
  // The cache keeps the log with a token for the source's name (another submission of the same
  // source may name it otherwise).
  const std::string kept = absl::StrReplaceAll(r.out, {{src_path, kSourceToken}, {dir + "/", ""}});
  out.report.set_log(log);
  for (auto& d : ParseDiagnostics(log, src_path, name)) *out.report.add_diagnostics() = d;
  if (r.timed_out) {
    out.report.set_ok(false);
    out.report.set_log(absl::StrCat(log, "\ncompilation ", r.Describe()));
  } else if (r.exit_code == 0 && std::filesystem::exists(so_path)) {
    out.report.set_ok(true);
    if (!cached_so.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(options_.cache_dir, ec);
      PKB_RETURN_IF_ERROR(WriteFileAtomic(cached_log, kept));
      std::string tmp = absl::StrCat(cached_so, ".tmp.", getpid());
      std::filesystem::copy_file(so_path, tmp, std::filesystem::copy_options::overwrite_existing,
                                 ec);
      if (!ec) std::filesystem::rename(tmp, cached_so, ec);
      out.library_path = ec ? so_path : cached_so;
    } else {
      out.library_path = so_path;
    }
  } else {
    out.report.set_ok(false);
    // A compiler that ran to its end and named an error in the source fails the same way every
    // time: kept (kKeptErrorLife), so that a job compiled ahead (or submitted again) is answered
    // from the cache. A crash, a signal, a limit or an error elsewhere (a header of the node's) is
    // not the source's to answer for, and is never kept.
    const bool named_error = std::any_of(
        out.report.diagnostics().begin(), out.report.diagnostics().end(),
        [&](const v1::Diagnostic& d) { return d.severity() == "error" && d.file() == name; });
    if (!cached_error.empty() && !r.signaled && r.exit_code != 0 && named_error) {
      (void)WriteFileAtomic(cached_error, kept);
    }
  }
  if (out.library_path != so_path) (void)RemoveTree(dir);
  out.report.set_seconds(absl::ToDoubleSeconds(absl::Now() - start));
  return out;
}

}  // namespace pkb
