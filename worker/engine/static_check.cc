#include "worker/engine/static_check.h"

#include <optional>
#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace pkb {
namespace {

// Replaces comments (and, with `strings`, the contents of string and character literals) by
// spaces, keeping every newline so that line numbers stay right.
std::string Blank(const std::string& src, bool strings) {
  std::string out = src;
  enum { kCode, kLine, kBlock, kString, kChar } state = kCode;
  for (size_t i = 0; i < out.size(); ++i) {
    char c = src[i], next = i + 1 < src.size() ? src[i + 1] : '\0';
    switch (state) {
      case kCode:
        if (c == '/' && next == '/') {
          state = kLine;
          out[i] = ' ';
        } else if (c == '/' && next == '*') {
          state = kBlock;
          out[i] = ' ';
        } else if (c == '"') {
          state = kString;
        } else if (c == '\'') {
          state = kChar;
        }
        break;
      case kLine:
        if (c == '\n') {
          state = kCode;
        } else {
          out[i] = ' ';
        }
        break;
      case kBlock:
        if (c == '*' && next == '/') {
          out[i] = out[i + 1] = ' ';
          ++i;
          state = kCode;
        } else if (c != '\n') {
          out[i] = ' ';
        }
        break;
      case kString:
      case kChar:
        if (c == '\\' && next != '\0') {
          if (strings) out[i] = out[i + 1] = ' ';
          ++i;
        } else if ((state == kString && c == '"') || (state == kChar && c == '\'')) {
          state = kCode;
        } else if (strings && c != '\n') {
          out[i] = ' ';
        }
        break;
    }
  }
  return out;
}

// How much of a line before a match a rule's not_after reads.
constexpr size_t kNotAfterSpan = 64;

}  // namespace

const std::vector<StaticRule>& StaticRules() {
  static const std::vector<StaticRule> rules = {
      {"include-path", R"(#\s*include\s*["<]\s*(/|[^">]*\.\.))", true,
       "includes by absolute or parent path; use the candidate API's headers, the C++ and CUDA "
       "headers, nccl.h or ATen by name"},
      {"harness-internals",
       R"(\bnamespace\s+pkb\b|\bpkb::(?!(as_tensor|to_scalar_type|use_stream|barrier_block|peer_ptr|wait_signal|put_signal|signal_slot)\b)|\bpkb_rank_|\bRankReport\b)",
       false,
       "reaches into the harness: a candidate talks to it only through the public headers "
       "(pkb/candidate.h, pkb/device.cuh, pkb/aten_core.h, pkb/aten.h) and the pkb_context it is "
       "given"},
      {"environment",
       R"(\b(getenv|secure_getenv|setenv|putenv|unsetenv|environ|__environ|getauxval)\b)", false,
       "reads or changes the environment; nothing a kernel needs is there (seeds and tokens are "
       "not either)"},
      {"proc-sys", R"((/proc/|/sys/|/dev/(?!null\b)|/etc/|/root|/home/))", true,
       "names a system path; a candidate reads no files, its inputs come through the API"},
      {"files",
       R"(\b(fopen|freopen|open|openat|creat|fdopen|mmap|ifstream|ofstream|fstream|opendir|readlink|unlink|rename|truncate|ftruncate|memfd_create|shm_open)\s*[<(])",
       false, "opens, maps or changes files; a candidate's only I/O is its tensors"},
      {"network",
       R"(\b(socket|socketpair|getaddrinfo|gethostbyname|sendto|recvfrom|sendmsg|recvmsg)\s*\(|<(sys/socket|sys/un|netinet/[a-z_]+|arpa/inet|netdb|curl/curl)\.h>)",
       false, "uses the network; the sandbox has none and the collective library is NCCL"},
      {"processes",
       R"(\b(fork|vfork|clone3|execl|execlp|execle|execv|execvp|execvpe|execve|fexecve|system|popen|posix_spawn|posix_spawnp|ptrace|kill|tgkill|raise|daemon|setsid|prctl|setrlimit|prlimit)\s*\()",
       false,
       "starts, signals or controls processes; a candidate runs inside the rank process only"},
      // clone apart: ATen's op (at::clone) and Tensor method (t.clone()) share the name.
      {"processes", R"(\bclone\s*\()", false,
       "starts, signals or controls processes; a candidate runs inside the rank process only",
       R"((\.|->)\s*$|(^|[^\w:])(at|torch)::$)"},
      {"library-namespaces", R"(\bnamespace\s+(at|torch|c10)\b)", false,
       "declares into or aliases ATen's namespaces (at, torch, c10); a candidate uses them and "
       "adds nothing to them"},
      {"dynamic-loading",
       R"(\b(dlopen|dlmopen|dlsym|dlvsym|dladdr|dlinfo)\s*\(|<dlfcn\.h>|\bLD_PRELOAD\b|\bRTLD_)",
       false,
       "loads libraries or looks symbols up at run time; link against what the API provides"},
      {"host-timers",
       R"(\b(cudaEventElapsedTime|cuEventElapsedTime|clock_gettime|gettimeofday|timespec_get|__rdtsc|__rdtscp)\s*\(|\b(steady_clock|system_clock|high_resolution_clock)\b)",
       false,
       "reads host or event timers; timing is the harness's job (device clock64() for bounded "
       "spin-waits is fine)"},
      {"c-linkage", R"(\bextern\s+"C"(?![^\n]*\bpkb_))", true,
       "gives C linkage to something other than a pkb_ entry point: a C symbol of the candidate "
       "could replace one of the CUDA runtime, NCCL or libc (timer or collective interposition); "
       "declare each entry point with its own extern \"C\""},
      {"symbol-rename",
       R"(\b(__asm__|asm)\s*\(\s*"[A-Za-z_.$][\w.$@]*"\s*\)|__attribute__\s*\(\(\s*(alias|weakref|ifunc|constructor|destructor))",
       true,
       "renames a symbol, aliases one or runs code at load time; the harness calls the entry "
       "points itself"},
      {"signals", R"(\b(signal|sigaction|sigprocmask|pthread_sigmask|setjmp|longjmp)\s*\()", false,
       "handles signals; a crash must end the rank so the harness can report it"},
      {"raw-syscalls", R"(\bsyscall\s*\(|\bsyscall\b\s*[;"]|\.incbin|\bint\s+\$?0x80\b)", true,
       "makes system calls directly or embeds files at assembly time"},
      {"inline-asm-host", R"(\b__asm__\s*(volatile\s*)?\(\s*"\s*(syscall|sysenter|int))", true,
       "host assembly that enters the kernel"},
  };
  return rules;
}

std::vector<v1::Diagnostic> CheckSource(const std::string& source, const std::string& name) {
  const std::string code = Blank(source, /*strings=*/true);
  const std::string with_strings = Blank(source, /*strings=*/false);
  std::vector<std::string> code_lines = absl::StrSplit(code, '\n');
  std::vector<std::string> string_lines = absl::StrSplit(with_strings, '\n');
  std::vector<v1::Diagnostic> out;
  for (const StaticRule& rule : StaticRules()) {
    const std::regex re(rule.pattern, std::regex::ECMAScript);
    std::optional<std::regex> not_after;
    if (!rule.not_after.empty()) not_after.emplace(rule.not_after, std::regex::ECMAScript);
    const auto& lines = rule.in_strings ? string_lines : code_lines;
    for (size_t i = 0; i < lines.size(); ++i) {
      // The line's first match that is not exempt by what precedes it. Only the last
      // kNotAfterSpan characters before a match are read, so a long line of exempt matches
      // costs linear time.
      for (std::sregex_iterator m(lines[i].begin(), lines[i].end(), re), end; m != end; ++m) {
        const size_t at = static_cast<size_t>(m->position(0));
        const size_t from = at > kNotAfterSpan ? at - kNotAfterSpan : 0;
        if (not_after && std::regex_search(lines[i].substr(from, at - from), *not_after)) {
          continue;
        }
        v1::Diagnostic d;
        d.set_file(name);
        d.set_line(static_cast<int32_t>(i + 1));
        d.set_column(static_cast<int32_t>(m->position(0) + 1));
        d.set_severity("error");
        d.set_message(absl::StrCat("[", rule.id, "] ", rule.reason, ": `", m->str(0), "`"));
        out.push_back(std::move(d));
        break;
      }
    }
  }
  return out;
}

}  // namespace pkb
