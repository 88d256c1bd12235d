// The judge's side of the candidate host, the process the submission runs in (host_process.cc):
// starts it with its end of a socketpair on descriptor 3 and nothing else of the judge's (its
// stdout goes to the judge's stderr, so it cannot write progress lines), and speaks
// rank_host.proto to it. Requests are synchronous; while one that runs the submission's code is
// in flight, the host may ask for a judges' barrier (pkb_context::host_barrier), served here.
//
//   CandidateHost host;
//   host.Start(init);          // spawns `pkb-rank --candidate-host`; set-up runs meanwhile
//   host.Bind(comm);           // the judges' communicator, for host barriers
//   host.Load();               // dlopen + pkb_init: the first code of the submission to run
//   host.Call(call);           // one call, synchronized in the host
//
// Once the submission is loaded, the host runs only while a request is served: it is stopped
// (SIGSTOP) when it answers and continued (SIGCONT) with the next request, so no thread of the
// submission runs while the judge works between requests (placing a round's inputs, checking).
//   host.Kill();               // nothing of the submission runs after this, its helpers included
//
// The judge must be a child subreaper (PR_SET_CHILD_SUBREAPER, set in pkb-rank's main): then every
// process the host starts, directly or not and whatever session it moves to, is re-parented to
// the judge when its parent dies, and Kill finds it.
#ifndef PKB_WORKER_ENGINE_CANDIDATE_HOST_H_
#define PKB_WORKER_ENGINE_CANDIDATE_HOST_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pkb/v1/rank_host.pb.h"
#include "problems/harness/comm.h"
#include "worker/engine/host_channel.h"
#include "worker/engine/rank_device.h"

namespace pkb {

class CandidateHost {
 public:
  CandidateHost() = default;
  ~CandidateHost() { (void)Kill(); }
  CandidateHost(const CandidateHost&) = delete;
  CandidateHost& operator=(const CandidateHost&) = delete;

  // Starts the host process alone: it loads its libraries and waits for Start's init. A judge
  // started ahead of its job (pkb-rank --await-spec) does this before the job is known.
  absl::Status Spawn();
  // A judge started ahead of its job with its device set up early (pkb-rank --device-early):
  // starts the host (unless Spawn did) and has it set up its device and world communicator from
  // `device` (backend, rank, world, rendezvous), without waiting. Start's init must name the same.
  absl::Status SetUpDevice(const v1::HostInit& device);
  // Starts the host (unless Spawn did) and has it set up its device and communicators (or, after
  // SetUpDevice, its groups), without waiting: that runs while the judge sets up its own (Bind,
  // then Load).
  absl::Status Start(const v1::HostInit& init);

  // Waits for the host's answers to SetUpDevice and Start: its device and communicators are set
  // up. An error is the harness's (nothing of the submission has run).
  absl::Status Ready();
  // The judges' communicator, for the barriers the host asks for.
  void Bind(Comm* comm) { comm_ = comm; }

  // Loads the submission and runs its pkb_init. Only once every judge has taken its report key
  // (the judges' communicator exists): this is the first code of the submission to run. From
  // its answer on, the host is stopped between requests.
  absl::Status Load();

  // Makes `segment` visible in the host; returns its id there.
  absl::StatusOr<int> Map(const RankDevice::SharedSegment& segment);
  void Unmap(int id);

  // One call of the candidate, synchronized in the host.
  absl::Status Call(const v1::HostCall& call);

  // One call, untimed, with the GPU's activity recorded in the host: its account of the call
  // (profile.proto; informative only).
  absl::StatusOr<v1::CallProfile> Profile(const v1::HostCall& call);

  // Calls in a row, run at once or (with loop.defer()) prepared for RunLoop.
  absl::Status Loop(const v1::HostLoop& loop);
  // Runs the loop prepared with defer; returns once the host says its device is idle, with the
  // host's trace of it (see HostReply.trace_ns; untrusted, for the log). `at_answer` (optional)
  // runs as soon as an answer that is not an error is in, before the host is stopped: from then
  // on nothing of the submission's may run on the GPU, and the judge's watch can start before the
  // stop's delay. Its error is returned once the host is stopped.
  absl::StatusOr<std::vector<int64_t>> RunLoop(
      const std::function<absl::Status()>& at_answer = nullptr);
  // The host's per-iteration times of the last timed loop.
  absl::StatusOr<std::vector<double>> Times();

  // Continues a stopped host ahead of the next request (the judge starts its clock after this),
  // and when the host answered the last request, before it was stopped again.
  void Wake() { Resume(); }
  std::chrono::steady_clock::time_point answered_at() const { return answered_at_; }

  // Kills the process (pkb_fini never runs), then every process it started, and waits for them:
  // nothing of the submission runs after this. Returns how many processes besides the host there
  // were (an honest submission starts none); an error when they could not all be stopped.
  absl::StatusOr<int> Kill();

  bool running() const { return pid_ > 0 && ch_ != nullptr; }

  // What the submission did against the host's stops between requests (a process it started, a
  // continue that was not the judge's, a stop that never came), or "" (nothing seen).
  const std::string& tampered() const { return tampered_; }

 private:
  // Sends `req` and waits for its answer, running the barriers the host asks for meanwhile:
  // only while the submission's code runs (pkb_init, calls). A barrier asked for at any other
  // time could only pair with a judges' barrier of another rank and put them out of step.
  // `at_answer` (optional) runs on an answer that is not an error, before the host is stopped.
  absl::StatusOr<v1::HostReply> Request(const v1::HostRequest& req, int fd = -1,
                                        const std::function<absl::Status()>& at_answer = nullptr);
  absl::StatusOr<v1::HostReply> Await(bool barriers);
  // Sends a set-up request (device, init) without waiting: Ready reads its answer. Spawns first.
  absl::Status SendSetUp(const v1::HostRequest& req);
  // The host went away mid-request: how it ended.
  absl::Status Died();
  void Stop();
  // Between requests once the submission is loaded: the host stopped, then continued.
  void Pause();
  void Resume();
  void Tampered(const std::string& what);  // the first finding is kept

  Comm* comm_ = nullptr;
  bool pause_between_ = false;  // set by Load
  bool paused_ = false;
  std::chrono::steady_clock::time_point answered_at_;
  std::string tampered_;
  pid_t pid_ = -1;
  int pending_ = 0;  // replies still to come to SetUpDevice and Start (their requests' order)
  std::unique_ptr<HostChannel> ch_;
  int next_id_ = 0;
  int timed_ = 0;  // marked iterations of the last timed loop (its times)
};

}  // namespace pkb

#endif  // PKB_WORKER_ENGINE_CANDIDATE_HOST_H_
