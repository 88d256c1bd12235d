#include "worker/engine/node_compiles.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/files.h"

namespace pkb {

namespace {

constexpr size_t kKeyChars = 16;  // of the cache key's hex, in an entry's name

struct Entry {
  // Its run file's name, "<base>.run" (or, where an engine of before left only that, the ended
  // entry's "<base>.<end>.done").
  std::string name;
  std::string base;  // "<start>.<pid>.<n>.<key16>[.<pidns>]": one run's, whatever its files
  int64_t start_ns = 0;
  pid_t pid = 0;
  std::string key;
  uint64_t pid_ns = 0;  // the inode of its process's PID namespace; 0: not known
  bool running = false;
  // Found with its lock free (its process died) and left as it was: the folder refused the
  // marker that ends it.
  bool dead = false;
  int64_t end_ns = 0;              // ended entries
  std::vector<std::string> files;  // its run file (first, where there is one) and end markers
};

// "<start>.<pid>.<n>.<key16>.<pidns>.run" (a run's file) or "<...>.<end>.done" (its end's
// marker); anything else (a run's file being made, a stray file) is neither.
std::optional<Entry> ParseFile(const std::string& name) {
  std::vector<std::string> f = absl::StrSplit(name, '.');
  Entry e;
  e.name = name;
  int n;
  // An engine of before the namespace field writes one field less: its entries count (pid_ns 0
  // is never this namespace's) and age out like the others.
  const bool done = !f.empty() && f.back() == "done";
  const bool with_ns = f.size() == (done ? 7u : 6u);
  const size_t fields = with_ns ? 5 : 4;
  if (f.size() == fields + 1 && f[fields] == "run") {
    e.running = true;
  } else if (f.size() == fields + 2 && f[fields + 1] == "done") {
    if (!absl::SimpleAtoi(f[fields], &e.end_ns)) return std::nullopt;
  } else {
    return std::nullopt;
  }
  if (!absl::SimpleAtoi(f[0], &e.start_ns) || !absl::SimpleAtoi(f[1], &e.pid) ||
      !absl::SimpleAtoi(f[2], &n) || f[3].size() != kKeyChars ||
      (with_ns && !absl::SimpleAtoi(f[4], &e.pid_ns))) {
    return std::nullopt;
  }
  e.key = f[3];
  e.base = absl::StrJoin(f.begin(), f.begin() + fields, ".");
  e.files = {name};
  return e;
}

int64_t NowNs() { return absl::ToUnixNanos(absl::Now()); }

// This process's PID namespace (the inode of /proc/self/ns/pid); 0 where it cannot be read.
uint64_t OwnPidNamespace() {
  static const uint64_t ns = [] {
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
  }();
  return ns;
}

// Makes the marker "<base>.<end>.done" that ends a run (its name is all a reader needs); false
// where it could not (the folder refused it, no descriptors left).
bool MarkEnd(const std::string& dir, const std::string& base, int64_t end_ns) {
  const std::string path = absl::StrCat(dir, "/", base, ".", end_ns, ".done");
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return errno == EEXIST;
  close(fd);
  return true;
}

// Whether a run's file is held by its running process (a lock we cannot take), free (its process
// died without marking its end, or marked it after our listing), or gone since the listing
// (removed by a pruner, by hand, or renamed by an engine of before). A file we cannot open (made by
// another user, no descriptors left) is held while its process lives, as far as this PID namespace
// can tell; one of another namespace is taken as held.
enum class RunFile { kHeld, kFree, kGone };
RunFile Lock(const std::string& path, const Entry& e) {
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return RunFile::kGone;
    const bool held = e.pid_ns != OwnPidNamespace() || !(kill(e.pid, 0) != 0 && errno == ESRCH);
    return held ? RunFile::kHeld : RunFile::kFree;
  }
  const bool held = flock(fd, LOCK_SH | LOCK_NB) != 0;
  close(fd);
  return held ? RunFile::kHeld : RunFile::kFree;
}

// The CPU time (clock ticks) used so far by each of `roots` with its descendants, those reaped
// included (/proc/<pid>/stat's utime, stime, cutime and cstime, summed over the tree). A root not
// found (gone, or in another PID namespace) is left out.
std::map<pid_t, int64_t> TreeCpu(const std::set<pid_t>& roots) {
  std::map<pid_t, int64_t> out;
  if (roots.empty()) return out;
  std::map<pid_t, std::vector<pid_t>> children;
  std::map<pid_t, int64_t> own;
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc", ec), end; !ec && it != end;
       it.increment(ec)) {
    pid_t pid;
    if (!absl::SimpleAtoi(it->path().filename().string(), &pid)) continue;
    absl::StatusOr<std::string> stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
    if (!stat.ok()) continue;
    const size_t paren = stat->rfind(')');
    if (paren == std::string::npos) continue;
    // From the state on: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
    // utime stime cutime cstime ...
    std::vector<absl::string_view> f =
        absl::StrSplit(absl::string_view(*stat).substr(paren + 1), ' ', absl::SkipEmpty());
    pid_t ppid;
    int64_t t[4];
    if (f.size() < 15 || !absl::SimpleAtoi(f[1], &ppid)) continue;
    bool ok = true;
    for (int i = 0; i < 4; ++i) ok &= absl::SimpleAtoi(f[11 + i], &t[i]);
    if (!ok) continue;
    own[pid] = t[0] + t[1] + t[2] + t[3];
    children[ppid].push_back(pid);
  }
  for (pid_t root : roots) {
    if (!own.count(root)) continue;
    int64_t sum = 0;
    std::vector<pid_t> todo = {root};
    std::set<pid_t> seen;
    while (!todo.empty()) {
      const pid_t p = todo.back();
      todo.pop_back();
      if (!seen.insert(p).second) continue;
      sum += own.count(p) ? own[p] : 0;
      for (pid_t c : children[p]) todo.push_back(c);
    }
    out[root] = sum;
  }
  return out;
}

// The folder's entries, one per run. A run's file is there from its start until it is removed, an
// hour after its end, and its name never changes: a listing beside the run's end cannot miss it
// (a listing surely returns every file that stays there, unrenamed, all through it). The end adds
// a marker. A run whose file is free and whose end no marker in the listing says (its process died,
// or marked its end after the listing) is ended here, now, with a marker of this reader's: a later
// end than the true one; where there are two, the earlier counts.
std::vector<Entry> ReadEntries(const std::string& dir, std::string* unread) {
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec), end;
  if (ec) {
    // No folder: no compile with a cache ran here yet. Else the answer is unknown, and why.
    struct stat st;
    const bool absent = ec == std::errc::no_such_file_or_directory ||
                        (lstat(dir.c_str(), &st) != 0 && errno == ENOENT);
    if (!absent) *unread = absl::StrCat(dir, ": ", ec.message());
    return {};
  }
  std::map<std::string, Entry> runs;  // by base
  for (; it != end; it.increment(ec)) {
    std::optional<Entry> f = ParseFile(it->path().filename().string());
    if (!f) continue;
    auto [at, first] = runs.try_emplace(f->base, *f);
    if (first) continue;
    Entry& e = at->second;
    if (f->running) {
      e.name = f->name;
      e.files.insert(e.files.begin(), f->name);
    } else {
      e.files.push_back(f->name);
      e.end_ns = e.running ? f->end_ns : std::min(e.end_ns, f->end_ns);
    }
    e.running = false;  // a run's file and a marker: ended
  }
  if (ec) *unread = absl::StrCat(dir, ": ", ec.message());
  std::vector<Entry> out;
  for (auto& [base, e] : runs) {
    if (e.running) {
      switch (Lock(absl::StrCat(dir, "/", e.name), e)) {
        case RunFile::kHeld:
          break;
        case RunFile::kGone:
          // Pruned (ended an hour ago, so started before that): long over. Else (the folder
          // emptied by hand, an engine of before renamed it as it ended): it ran until now.
          if (e.start_ns < NowNs() - absl::ToInt64Nanoseconds(NodeCompiles::kEntryLife)) continue;
          e.running = false;
          e.end_ns = NowNs();
          break;
        case RunFile::kFree:
          e.running = false;
          e.end_ns = NowNs();
          if (MarkEnd(dir, base, e.end_ns)) {
            e.files.push_back(absl::StrCat(base, ".", e.end_ns, ".done"));
          } else {
            e.dead = true;  // found dead again by every reader (Mark::dead)
          }
          break;
      }
    }
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace

NodeCompiles::Run::~Run() {
  // The end's marker before the lock goes: a reader never finds a living run's file free and
  // unmarked.
  (void)MarkEnd(dir_, base_, NowNs());
  close(fd_);
}

std::unique_ptr<NodeCompiles::Run> NodeCompiles::Begin(const std::string& key) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) return nullptr;
  // Old entries go first (a dead run's is ended by the reading), and what a process that died
  // while making its entry left.
  std::string unread;
  const int64_t old = NowNs() - absl::ToInt64Nanoseconds(kEntryLife);
  for (const Entry& e : ReadEntries(dir_, &unread)) {
    if (e.running || e.dead || e.end_ns >= old) continue;
    // The run's file first: a marker without it is still an ended run, a run's file without its
    // marker would be a dead run, ended anew by the next reader.
    for (const std::string& f : e.files) std::filesystem::remove(absl::StrCat(dir_, "/", f), ec);
  }
  const auto made_before = std::filesystem::file_time_type::clock::now() -
                           std::chrono::nanoseconds(absl::ToInt64Nanoseconds(kEntryLife));
  for (std::filesystem::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code time_ec;
    if (absl::EndsWith(it->path().filename().string(), ".making") &&
        it->last_write_time(time_ec) < made_before && !time_ec) {
      std::filesystem::remove(it->path(), time_ec);
    }
  }
  static std::atomic<int> runs{0};
  const std::string base = absl::StrCat(NowNs(), ".", getpid(), ".", runs++, ".",
                                        key.substr(0, kKeyChars), ".", OwnPidNamespace());
  // Made under a name that is no entry, locked, then named: a reader never finds it unlocked.
  const std::string making = absl::StrCat(dir_, "/.", base, ".making");
  const int fd = open(making.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return nullptr;
  // Readable by every user of the node's cache, whatever the umask (Held).
  if (fchmod(fd, 0644) != 0 || flock(fd, LOCK_EX) != 0 ||
      std::rename(making.c_str(), absl::StrCat(dir_, "/", base, ".run").c_str()) != 0) {
    close(fd);
    std::filesystem::remove(making, ec);
    return nullptr;
  }
  return std::unique_ptr<Run>(new Run(fd, dir_, base));
}

NodeCompiles::Mark NodeCompiles::MarkNow() const {
  Mark mark;
  std::string unread;  // RanBeside says it
  std::vector<Entry> running;
  std::set<pid_t> pids;
  for (Entry& e : ReadEntries(dir_, &unread)) {
    if (e.dead) mark.dead.insert(e.name);
    if (!e.running) continue;
    pids.insert(e.pid);
    running.push_back(std::move(e));
  }
  const std::map<pid_t, int64_t> cpu = TreeCpu(pids);
  for (const Entry& e : running) {
    if (e.pid_ns != OwnPidNamespace()) continue;  // not this /proc's (RanBeside)
    if (auto it = cpu.find(e.pid); it != cpu.end()) mark.cpu[e.name] = it->second;
  }
  // After the reading: a dead run it ended is over before the mark.
  mark.at = absl::Now();
  return mark;
}

int NodeCompiles::RanBeside(const Mark& mark, const std::string& own_key,
                            std::string* unread) const {
  std::string why;
  const std::vector<Entry> entries = ReadEntries(dir_, &why);
  if (!why.empty()) {
    if (unread != nullptr) *unread = why;
    return 1;  // not known to be none
  }
  const int64_t from = absl::ToUnixNanos(mark.at);
  const std::string own = own_key.substr(0, kKeyChars);
  // Only a run of this PID namespace can be looked up in this /proc (another's pid may name an
  // unrelated process here): another's is always counted.
  const uint64_t own_ns = OwnPidNamespace();
  auto ours = [&](const Entry& e) { return own_ns != 0 && e.pid_ns == own_ns; };
  std::set<pid_t> marked;
  for (const Entry& e : entries) {
    if (e.running && ours(e) && mark.cpu.count(e.name)) marked.insert(e.pid);
  }
  const std::map<pid_t, int64_t> cpu = TreeCpu(marked);
  int beside = 0;
  for (const Entry& e : entries) {
    if (!own.empty() && e.key == own) continue;
    if (e.dead && mark.dead.count(e.name)) continue;         // dead already at the mark
    if (!e.running && !e.dead && e.end_ns < from) continue;  // over before the mark
    if (e.running && ours(e)) {
      // Running at the mark and now, and its processes used no CPU time between (stopped all
      // along: the worker stops its compiles while its job is timed).
      auto then = mark.cpu.find(e.name);
      auto now = cpu.find(e.pid);
      if (then != mark.cpu.end() && now != cpu.end() && now->second == then->second) continue;
    }
    ++beside;
  }
  return beside;
}

}  // namespace pkb
