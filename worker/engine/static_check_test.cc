#include "worker/engine/static_check.h"

#include <catch2/catch.hpp>
#include <filesystem>

#include "common/files.h"

namespace pkb {
namespace {

std::string Rules(const std::string& source) {
  std::string ids;
  for (const auto& d : CheckSource(source, "k.cu")) {
    ids += d.message().substr(1, d.message().find(']') - 1) + ":" + std::to_string(d.line()) + " ";
  }
  return ids;
}

TEST_CASE("static check: each rule catches its plain attempt, with the line", "[static]") {
  CHECK(Rules("#include \"/etc/shadow\"\n") == "include-path:1 proc-sys:1 ");
  CHECK(Rules("#include \"../../server/auth.h\"\n") == "include-path:1 ");
  CHECK(Rules("int x;\nnamespace pkb { int y; }\n") == "harness-internals:2 ");
  CHECK(Rules("auto s = getenv(\"PKB_SEED\");\n") == "environment:1 ");
  CHECK(Rules("const char* p = \"/proc/self/maps\";\n") == "proc-sys:1 ");
  CHECK(Rules("FILE* f = fopen(\"out\", \"w\");\n") == "files:1 ");
  CHECK(Rules("#include <sys/socket.h>\nint s = socket(2, 1, 0);\n") == "network:1 network:2 ");
  CHECK(Rules("void f() { while (1) fork(); }\n") == "processes:1 ");
  CHECK(Rules("void f() {\n  ::kill(1, 9);\n  std::system(\"x\");\n}\n") ==
        "processes:2 processes:3 ");
  CHECK(Rules("void f() { int a = 0>kill(1, 9); }\n") == "processes:1 ");
  CHECK(Rules("void f() { at::kill(1, 9); t.fork(); }\n") == "processes:1 ");
  CHECK(Rules("int r = ::clone(f, s, 0, 0);\nint q = x::at::clone(f, s, 0, 0);\n") ==
        "processes:1 processes:2 ");
  // A member call or an ATen op first on the line does not hide a real call after it.
  CHECK(Rules("auto c = t.clone(); int r = clone(f, s, 0, 0);\n") == "processes:1 ");
  // ATen's namespaces cannot be reopened or aliased to smuggle a name in under at::.
  CHECK(Rules("namespace at { using ::clone; }\nnamespace torch = std;\n") ==
        "library-namespaces:1 library-namespaces:2 ");
  CHECK(Rules("void* h = dlopen(\"libcuda.so\", 1);\n") == "dynamic-loading:1 ");
  CHECK(Rules("auto t = std::chrono::steady_clock::now();\n") == "host-timers:1 ");
  CHECK(Rules("extern \"C\" int cudaEventElapsedTime(float*, void*, void*) { return 0; }\n") ==
        "host-timers:1 c-linkage:1 ");
  CHECK(Rules("extern \"C\" {\nint ncclAllReduce();\n}\n") == "c-linkage:1 ");
  CHECK(Rules("int f() asm(\"cudaStreamSynchronize\");\n") == "symbol-rename:1 ");
  CHECK(Rules("void h(int) {}\nvoid g() { signal(11, h); }\n") == "signals:2 ");
  CHECK(Rules("long r = syscall(39);\n") == "raw-syscalls:1 ");
  CHECK(Rules("asm(\".incbin \\\"/etc/passwd\\\"\");\n").find("raw-syscalls:1") !=
        std::string::npos);
}

TEST_CASE("static check: comments, strings and look-alike names are not findings", "[static]") {
  CHECK(Rules("// we never call getenv() or fork() here\n/* socket( */\nint x;\n").empty());
  CHECK(Rules("printf(\"forking is not done: fork()\");\n").empty());
  CHECK(Rules("__device__ void send(int* p) { *p = 1; }\nint opener = 0;\n").empty());
  CHECK(Rules("#include <pkb/candidate.h>\n#include <cuda_bf16.h>\n#include <nccl.h>\n").empty());
  CHECK(Rules("extern \"C\" int pkb_run(pkb_context* ctx);\n").empty());
  CHECK(Rules("long long t0 = clock64();\ncudaEventRecord(ev, s);\n").empty());
  // ATen's clone, as an op and as a method, is not the process call of the same name.
  CHECK(Rules("at::Tensor c = at::clone(a);\nauto d = c.clone();\nauto e = p->clone();\n"
              "auto f = torch::clone(a);\n")
            .empty());
  // A line of many exempt calls is read in linear time (each reads only a bounded span before it).
  std::string many;
  for (int i = 0; i < 20000; ++i) many += "a.clone();";
  CHECK(Rules(many + "\n").empty());
  CHECK(Rules("#include <cstdio>\nvoid f() { fprintf(stderr, \"/dev/null\"); }\n").empty());
}

TEST_CASE("static check: every shipped example and test candidate passes", "[static]") {
  int checked = 0;
  for (const char* dir : {"/problems/examples", "/tests/engine/cpu_candidates",
                          "/tests/engine/gpu_candidates"}) {
    for (const auto& e : std::filesystem::directory_iterator(std::string(PKB_SOURCE_DIR) + dir)) {
      std::string ext = e.path().extension().string();
      if (ext != ".cu" && ext != ".cc") continue;
      auto src = ReadFile(e.path().string());
      REQUIRE(src.ok());
      INFO(e.path().string());
      CHECK(Rules(*src) == "");
      ++checked;
    }
  }
  CHECK(checked >= 15);
}

}  // namespace
}  // namespace pkb
