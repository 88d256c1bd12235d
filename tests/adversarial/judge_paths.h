// For corpus entries: where this rank's judge keeps its report (its --report= path, from the
// judge's command line, which is public) and so the scratch folder beside it. System calls and
// /proc are named at run time, so that the static check's rules do not see them: the entries
// test the sandbox and the engine, not the check.
#ifndef PKB_TESTS_ADVERSARIAL_JUDGE_PATHS_H_
#define PKB_TESTS_ADVERSARIAL_JUDGE_PATHS_H_

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#define PKB_JOIN(a, b) a##b

// The judge's report path (rank r's report is it plus ".r"); empty when it cannot be read.
inline std::string JudgeReportPath() {
  char path[64];
  std::snprintf(path, sizeof path, "%cproc%c%d%ccmdline", '/', '/', int(getppid()), '/');
  std::string cmdline;
  int fd = PKB_JOIN(op, en)(path, O_RDONLY);
  if (fd < 0) return {};
  char buf[4096];
  for (ssize_t k; (k = PKB_JOIN(re, ad)(fd, buf, sizeof buf)) > 0;) cmdline.append(buf, size_t(k));
  close(fd);
  for (char& c : cmdline) c = c == '\0' ? '\n' : c;
  const size_t at = cmdline.find("--report=");
  if (at == std::string::npos) return {};
  return cmdline.substr(at + 9, cmdline.find('\n', at) - at - 9);
}

#endif  // PKB_TESTS_ADVERSARIAL_JUDGE_PATHS_H_
