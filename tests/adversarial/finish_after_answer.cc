// Stops the judge's clock early: honest for the verification trials, then each call only queues
// its work for a thread of its own that does it a little later, so that the candidate's process
// says the window is over before the work is done; pkb_fini would finish the rest. Run with no
// picked copies (--spot-checks 0): the check that stops it is the judge's copy of the last call's
// outputs the moment the process answers (pkb_fini never runs after a timed window). Verdict:
// MISMATCH.
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "common.h"
PKB_CANDIDATE_API_V1;

namespace {

struct Job {
  const void* in;
  void* out;
  size_t bytes;
};

std::mutex mu;
std::condition_variable cv;
std::deque<Job> queue;
bool stopping = false;
std::thread worker;
int calls = 0;

void Work() {
  std::unique_lock<std::mutex> lock(mu);
  for (;;) {
    cv.wait(lock, [] { return stopping || !queue.empty(); });
    if (queue.empty()) return;
    Job j = queue.front();
    queue.pop_front();
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::memcpy(j.out, j.in, j.bytes);  // one rank: the all-reduce is the input itself
    lock.lock();
  }
}

}  // namespace

extern "C" int pkb_run(pkb_context*, const pkb_tensor* in, int, const pkb_scalar*, int,
                       pkb_tensor* out, int) {
  const size_t bytes = pkb_numel(&in[0]) * 2;
  if (++calls <= 5) {
    std::memcpy(out[0].data, in[0].data, bytes);
    return 0;
  }
  std::lock_guard<std::mutex> lock(mu);
  if (!worker.joinable()) worker = std::thread(Work);
  queue.push_back({in[0].data, out[0].data, bytes});
  cv.notify_one();
  return 0;
}

extern "C" void pkb_fini(pkb_context*) {
  {
    std::lock_guard<std::mutex> lock(mu);
    stopping = true;
    cv.notify_one();
  }
  if (worker.joinable()) worker.join();
}
