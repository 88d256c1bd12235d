// The compiles of this node, as the node's baseline store needs to know them.
//
// A reference timed while a compiler runs on the node may be slowed by it (CPU, memory bandwidth,
// caches), and the node's baseline (baseline_store.h) must take only measurements of the
// reference alone. The worker stops its own compiles while its job is timed and counts them; but
// several workers may share a node (one per share of its GPUs), and pkb-eval may be started by
// hand. So every compiler run of a CandidateCompiler with a cache folder leaves an entry in
// <cache>/compiles/, whoever started it, and an evaluation asks which of them ran beside it.
//
//   NodeCompiles node(cache_dir + "/compiles");
//   NodeCompiles::Mark mark = node.MarkNow();       // as the job begins
//   ...                                             // the job, its timing
//   int beside = node.RanBeside(mark, own_key);     // compiles that ran beside it
//
//   std::unique_ptr<NodeCompiles::Run> run = node.Begin(key);  // around the compiler's run
//
// An entry is a file, "<start ns>.<pid>.<n>.<key16>.<pid namespace>.run", made as its compiler
// starts and held by its process with an exclusive flock while the compiler runs; a marker
// "<...>.<end ns>.done" beside it says the run's end. The run's file is never renamed, so that a
// reader listing the folder as a run ends cannot miss it (a listing surely returns every file that
// stays, unrenamed, all through it). A compile ran beside [mark, now] if its run overlaps it,
// unless it was running at the mark and its processes used no CPU time since (stopped: the worker
// stops its compiles while its job is timed; measured in /proc, at its clock tick of 10 ms, for a
// run of the reader's own PID namespace only: another's is always counted). A run whose process
// died without marking its end (its lock is free) is ended by the first reader to see it, at that
// time; one the folder does not let us mark counts for the marks taken before it was found dead.
// Entries are removed an hour after their end (an engine of before left one file, renamed to the
// marker's name: it is read as an ended run).
//
// The folder must be the node's own (not shared with other hosts), as the rest of the cache is.
// Thread- and process-safe. Nothing here fails a compile or an evaluation: a folder that cannot
// be written leaves no entry (a run with no entry is not seen), one that cannot be read is
// answered as one compile beside (the measurement is then not taken as alone).
#ifndef PKB_WORKER_ENGINE_NODE_COMPILES_H_
#define PKB_WORKER_ENGINE_NODE_COMPILES_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/time/time.h"

namespace pkb {

class NodeCompiles {
 public:
  // Entries ended longer ago than this are removed (a dead run's ends when a reader finds it).
  static constexpr absl::Duration kEntryLife = absl::Hours(1);

  explicit NodeCompiles(std::string dir) : dir_(std::move(dir)) {}

  // One compiler run's entry, held until destroyed.
  class Run {
   public:
    ~Run();
    Run(const Run&) = delete;
    Run& operator=(const Run&) = delete;

   private:
    friend class NodeCompiles;
    Run(int fd, std::string dir, std::string base)
        : fd_(fd), dir_(std::move(dir)), base_(std::move(base)) {}
    int fd_;
    std::string dir_, base_;  // the entry is base_ + ".run"
  };
  // The entry of a compiler run of cache key `key` (Sha256Hex), from now until the result is
  // destroyed; null where it could not be written. Prunes old entries first.
  std::unique_ptr<Run> Begin(const std::string& key);

  // The start of an evaluation: when, the CPU time each running compile had used by then (clock
  // ticks, its processes' and their reaped children's, by entry name), and the dead runs whose
  // entries could not be ended.
  struct Mark {
    absl::Time at;
    std::map<std::string, int64_t> cpu;
    std::set<std::string> dead;
  };
  Mark MarkNow() const;

  // Compiler runs that ran at some time between `mark` and now, other than those of `own_key`
  // (the evaluation's own source, compiled by itself or ahead of it; empty: none excluded). 1
  // where the folder exists but cannot be listed, and then in `unread` (optional) why.
  int RanBeside(const Mark& mark, const std::string& own_key, std::string* unread = nullptr) const;

 private:
  std::string dir_;
};

}  // namespace pkb

#endif  // PKB_WORKER_ENGINE_NODE_COMPILES_H_
