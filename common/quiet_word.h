// The worker's word to a job's engine that the job may be timed: nothing else of the worker runs
// (its compile tasks are stopped), and how many compile tasks ran beside the job until then.
// A FIFO the worker makes in the engine's folder (mode 0600) and names with pkb-eval
// --quiet-from; the engine listens on it before its ranks can reach their timing, and waits for
// the word when they do (engine.h EvalOptions::quiet_from).
//
//   // engine
//   PKB_ASSIGN_OR_RETURN(QuietListener l, QuietListener::Open(path));
//   std::optional<int> beside = l.Await(absl::Seconds(2));   // nullopt: no word came
//   // worker, once its compiles are stopped
//   TellQuiet(path, 1);                                     // "quiet 1\n"
//   // engine, then, to rank 0's judge (its stdin)
//   GoWord(report_key);
#ifndef PKB_COMMON_QUIET_WORD_H_
#define PKB_COMMON_QUIET_WORD_H_

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pkb {

class QuietListener {
 public:
  // Opens the FIFO at `path` to read, without waiting for a writer; it also holds a writer of its
  // own, so that a word's writer closing is no end of the stream.
  static absl::StatusOr<QuietListener> Open(const std::string& path);
  QuietListener(QuietListener&& other) noexcept;
  QuietListener& operator=(QuietListener&& other) noexcept;
  ~QuietListener();

  // The next word's count of compile tasks, within `limit`; nullopt when none came, or what
  // came is not a word.
  std::optional<int> Await(absl::Duration limit);

 private:
  QuietListener(int read_fd, int write_fd) : read_fd_(read_fd), write_fd_(write_fd) {}
  int read_fd_ = -1;
  int write_fd_ = -1;
  std::string pending_;  // bytes read after the last word's end
};

// Writes the word (one line, "quiet N") to the engine listening on `path`; an error where none
// listens (ENXIO) or the FIFO is not there.
absl::Status TellQuiet(const std::string& path, int compiles_beside);

// The engine's word to rank 0's judge that it may time (one line, "\n" included): a MAC under a
// key derived from the rank's report key, which the judge took before any code of the submission
// ran, so that nothing else that reaches the judge's stdin can say it.
std::string GoWord(std::string_view report_key);

// The judge's wait for `word` (GoWord's line) on `fd`: true once a line ended in it; false at the
// end of the stream or after `limit`. Other lines are passed over, whatever their length.
bool AwaitGoWord(int fd, const std::string& word, absl::Duration limit);

}  // namespace pkb

#endif  // PKB_COMMON_QUIET_WORD_H_
