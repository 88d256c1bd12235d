// Soak test of the coordinator: a fixed, open-loop rate of submissions (well below capacity) for a
// long time against a real pkb-coordinator process, with simulated workers that answer at once
// (InstantWorker, a test double). It answers three questions:
//   - no job lost: every accepted submission reaches DONE with a verdict, counted on the client
//     side and from the coordinator's own /metrics (pkb_jobs_submitted_total and
//     pkb_jobs_finished_total);
//   - memory flat: the coordinator's VmRSS (/proc/<pid>/status) sampled over the run, with the
//     slope after warm-up;
//   - latency stable: submit-to-verdict p50 / p99 per time bin (by submission time), so drift
//     shows.
// The mix of submissions (by index i mod 100): unique sources that pass, fail to compile or are
// REJECTED by the (simulated) harness (80 %); twins, a new source sent twice back to back, the
// second joining the first in flight (2 %); repeats of 8 popular sources that hit the cache (13 %);
// and submissions the coordinator refuses outright (world size 3, unsupported: 5 %).
//
//   bench/soak/run.sh BUILD_DIR --duration 600 --rate 100 --workers 50
//
// Exit status 1 when a job was lost or the coordinator's counters disagree, or, with
// --max-rss-growth-mib, when RSS after warm-up grew by more than that. No timing is asserted.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/coordinator_load/instant_worker.h"
#include "pkb/v1/evaluation.grpc.pb.h"

namespace pkb {
namespace {

enum class Kind { kUnique, kCompileError, kRejectedVerdict, kTwin, kPopular, kRefused };

Kind KindOf(int64_t i) {
  int r = static_cast<int>(i % 100);
  if (r < 70) return Kind::kUnique;
  if (r < 77) return Kind::kCompileError;
  if (r < 80) return Kind::kRejectedVerdict;
  if (r < 82) return Kind::kTwin;
  if (r < 95) return Kind::kPopular;
  return Kind::kRefused;
}

// What the client saw, shared by every in-flight submission.
struct Tally {
  std::mutex mu;
  std::map<int, std::vector<double>> latency_ms_by_bin;  // submission time bin -> submit->DONE
  std::map<std::string, int64_t> verdicts;               // status name (+ " cached")
  std::atomic<int64_t> sent{0}, accepted{0}, done{0}, refused{0}, unexpected{0}, in_flight{0};
};

// One Submit stream: records the verdict and its latency, then deletes itself.
class Submission : public grpc::ClientReadReactor<v1::EvalEvent> {
 public:
  Submission(v1::Evaluation::Stub* stub, v1::SubmitRequest req, Kind kind, int bin, Tally* tally)
      : req_(std::move(req)), kind_(kind), bin_(bin), tally_(tally), start_(absl::Now()) {
    ++tally_->in_flight;
    ++tally_->sent;
    ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    stub->async()->Submit(&ctx_, &req_, this);
    StartRead(&ev_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    if (!accepted_) {
      accepted_ = true;
      ++tally_->accepted;
    }
    if (ev_.stage() == v1::DONE && !done_) {
      done_ = true;
      double ms = absl::ToDoubleMilliseconds(absl::Now() - start_);
      std::string verdict = v1::Status_Name(ev_.result().status());
      if (ev_.result().cached()) verdict += " (cached)";
      std::lock_guard<std::mutex> l(tally_->mu);
      tally_->latency_ms_by_bin[bin_].push_back(ms);
      ++tally_->verdicts[verdict];
    }
    StartRead(&ev_);
  }
  void OnDone(const grpc::Status& s) override {
    if (done_) ++tally_->done;
    bool expected = kind_ == Kind::kRefused ? (!accepted_ && !s.ok()) : (done_ && s.ok());
    if (kind_ == Kind::kRefused && !accepted_) ++tally_->refused;
    if (!expected) {
      ++tally_->unexpected;
      std::cerr << "unexpected end of a submission (kind " << static_cast<int>(kind_)
                << ", accepted " << accepted_ << ", done " << done_ << "): " << s.error_code()
                << " " << s.error_message() << std::endl;
    }
    --tally_->in_flight;
    delete this;
  }

 private:
  grpc::ClientContext ctx_;
  v1::SubmitRequest req_;
  v1::EvalEvent ev_;
  Kind kind_;
  int bin_;
  Tally* tally_;
  absl::Time start_;
  bool accepted_ = false, done_ = false;
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  size_t i = std::min(v.size() - 1, static_cast<size_t>(p * v.size()));
  std::nth_element(v.begin(), v.begin() + i, v.end());
  return v[i];
}

int64_t RssKib(int pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6);
  return -1;
}

// GET http://host:port/metrics with a bare socket (loopback only; no HTTP library needed).
std::string Scrape(const std::string& host_port) {
  std::vector<std::string> hp = absl::StrSplit(host_port, ':');
  if (hp.size() != 2) return "";
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::atoi(hp[1].c_str())));
  inet_pton(AF_INET, hp[0].c_str(), &a.sin_addr);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    std::string req =
        absl::StrCat("GET /metrics HTTP/1.0\r\nHost: ", host_port, "\r\nConnection: close\r\n\r\n");
    if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[8192];
      for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) out.append(buf, n);
    }
  }
  close(fd);
  return out;
}

// Sum of every sample of `name` whose labels contain `label` (empty: all).
double MetricSum(const std::string& text, const std::string& name, const std::string& label = "") {
  double sum = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name, 0) != 0) continue;
    char next = line.size() > name.size() ? line[name.size()] : '\0';
    if (next != '{' && next != ' ') continue;
    if (!label.empty() && line.find(label) == std::string::npos) continue;
    sum += std::atof(line.substr(line.rfind(' ') + 1).c_str());
  }
  return sum;
}

int Main(int argc, char** argv) {
  std::string address, metrics;
  int workers = 50, pid = 0, channels = 4;
  double rate = 100, duration_s = 600, bin_s = 60, rss_every_s = 10, warmup_s = 60,
         max_rss_growth_mib = 0, drain_s = 60;
  CLI::App app{"coordinator soak test (simulated instant workers, fixed submission rate)"};
  app.add_option("--coordinator", address, "gRPC address")->required();
  app.add_option("--metrics", metrics, "the coordinator's --metrics-listen host:port")->required();
  app.add_option("--coordinator-pid", pid, "for VmRSS")->required();
  app.add_option("--workers", workers)->capture_default_str();
  app.add_option("--rate", rate, "submissions per second (open loop)")->capture_default_str();
  app.add_option("--duration", duration_s, "seconds of submissions")->capture_default_str();
  app.add_option("--bin", bin_s, "seconds per latency row")->capture_default_str();
  app.add_option("--rss-every", rss_every_s, "seconds between RSS samples")->capture_default_str();
  app.add_option("--warmup", warmup_s, "seconds before the RSS slope and growth are measured")
      ->capture_default_str();
  app.add_option("--max-rss-growth-mib", max_rss_growth_mib,
                 "fail when RSS after warm-up grows by more than this (0: report only)")
      ->capture_default_str();
  app.add_option("--drain", drain_s, "seconds to wait for the last verdicts")
      ->capture_default_str();
  app.add_option("--channels", channels)->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  std::vector<std::shared_ptr<grpc::Channel>> chans;
  std::vector<std::unique_ptr<v1::Worker::Stub>> wstubs;
  std::vector<std::unique_ptr<v1::Evaluation::Stub>> estubs;
  for (int i = 0; i < channels; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("grpc.channel_id", i);
    chans.push_back(grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
    wstubs.push_back(v1::Worker::NewStub(chans.back()));
    estubs.push_back(v1::Evaluation::NewStub(chans.back()));
  }

  // RSS sampler, from before the workers connect.
  std::atomic<bool> stop{false};
  std::mutex rss_mu;
  std::vector<std::pair<double, int64_t>> rss;  // (seconds since start, KiB)
  absl::Time t0 = absl::Now();
  std::thread sampler([&] {
    while (!stop) {
      int64_t kib = RssKib(pid);
      double t = absl::ToDoubleSeconds(absl::Now() - t0);
      {
        std::lock_guard<std::mutex> l(rss_mu);
        rss.emplace_back(t, kib);
      }
      std::cout << absl::StrFormat("rss t=%.0fs %.1f MiB", t, kib / 1024.0) << std::endl;
      absl::Time next = t0 + absl::Seconds(rss_every_s * rss.size());
      while (!stop && absl::Now() < next) absl::SleepFor(absl::Milliseconds(50));
    }
  });

  std::vector<std::unique_ptr<InstantWorker>> ws;
  for (int i = 0; i < workers; ++i)
    ws.push_back(
        std::make_unique<InstantWorker>(wstubs[i % channels].get(), absl::StrCat("soak-", i)));
  for (int i = 0; i < 600; ++i) {
    int n = 0;
    for (auto& w : ws) n += w->registered;
    if (n == workers) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  int registered = 0;
  for (auto& w : ws) registered += w->registered;
  std::cout << "workers registered: " << registered << "/" << workers << std::endl;
  std::thread heartbeats([&] {
    while (!stop) {
      for (auto& w : ws) w->Heartbeat();
      for (int i = 0; i < 10 && !stop; ++i) absl::SleepFor(absl::Milliseconds(100));
    }
  });

  // Open loop: submission i leaves at start + i / rate, whatever the earlier ones are doing.
  Tally tally;
  absl::Time start = absl::Now();
  const int64_t total = static_cast<int64_t>(rate * duration_s);
  const int64_t nonce = absl::ToUnixNanos(start);
  double max_lag_ms = 0;
  for (int64_t i = 0; i < total; ++i) {
    absl::Time due = start + absl::Seconds(i / rate);
    absl::Time now = absl::Now();
    // The second of two twins leaves right after the first (same new source), so it finds that
    // job in flight and joins it.
    bool back_to_back = KindOf(i) == Kind::kTwin && i % 2 == 1;
    if (now < due && !back_to_back) absl::SleepFor(due - now);
    if (!back_to_back)
      max_lag_ms = std::max(max_lag_ms, absl::ToDoubleMilliseconds(absl::Now() - due));
    Kind kind = KindOf(i);
    v1::SubmitRequest r;
    r.set_problem_id(1);
    r.set_world_size(2);
    r.set_gpu_class("sim");
    switch (kind) {
      case Kind::kUnique:
        r.set_source(absl::StrCat("// FAKE_OK soak ", nonce, " ", i));
        break;
      case Kind::kCompileError:
        r.set_source(absl::StrCat("// FAKE_COMPILE_ERROR soak ", nonce, " ", i));
        break;
      case Kind::kRejectedVerdict:
        r.set_source(absl::StrCat("// FAKE_REJECT soak ", nonce, " ", i));
        break;
      case Kind::kTwin:  // a new source, sent twice back to back: the second joins the first
        r.set_source(absl::StrCat("// FAKE_OK twin ", nonce, " ", i / 100));
        break;
      case Kind::kPopular:  // 8 sources: the first of each runs, the rest hit the cache
        r.set_source(absl::StrCat("// FAKE_OK popular ", nonce, " ", (i / 100) % 8));
        break;
      case Kind::kRefused:
        r.set_world_size(3);  // the catalog says unsupported: refused at Submit
        r.set_source(absl::StrCat("// FAKE_OK refused ", nonce, " ", i));
        break;
    }
    int bin = static_cast<int>(absl::ToDoubleSeconds(absl::Now() - start) / bin_s);
    new Submission(estubs[i % channels].get(), std::move(r), kind, bin, &tally);
  }
  double submit_s = absl::ToDoubleSeconds(absl::Now() - start);
  for (absl::Time end = absl::Now() + absl::Seconds(drain_s);
       tally.in_flight > 0 && absl::Now() < end;)
    absl::SleepFor(absl::Milliseconds(20));
  absl::SleepFor(absl::Milliseconds(500));  // the gauges refresh on the coordinator's tick
  std::string text = Scrape(metrics);
  stop = true;
  heartbeats.join();
  sampler.join();
  int64_t rss_end = RssKib(pid);
  rss.emplace_back(absl::ToDoubleSeconds(absl::Now() - t0), rss_end);

  // Latency per bin.
  std::cout << "\nsubmit -> verdict, by submission time:\n| from s | verdicts | p50 ms | p99 ms | "
               "max ms |\n|---|---|---|---|---|\n";
  {
    std::lock_guard<std::mutex> l(tally.mu);
    for (auto& [bin, v] : tally.latency_ms_by_bin)
      std::cout << absl::StrFormat("| %.0f | %d | %.1f | %.1f | %.1f |\n", bin * bin_s, v.size(),
                                   Percentile(v, 0.5), Percentile(v, 0.99),
                                   *std::max_element(v.begin(), v.end()));
    std::cout << "verdicts:";
    for (auto& [k, n] : tally.verdicts) std::cout << " " << k << "=" << n;
    std::cout << "\n";
  }

  // RSS: start, end, max, and the least-squares slope after warm-up.
  int64_t rss_start = rss.front().second, rss_max = 0, rss_at_warm = -1, rss_max_warm = 0;
  double sx = 0, sy = 0, sxx = 0, sxy = 0, n = 0;
  for (auto& [t, kib] : rss) {
    rss_max = std::max(rss_max, kib);
    if (t < warmup_s) continue;
    if (rss_at_warm < 0) rss_at_warm = kib;
    rss_max_warm = std::max(rss_max_warm, kib);
    double mib = kib / 1024.0, min = t / 60;
    sx += min, sy += mib, sxx += min * min, sxy += min * mib, n += 1;
  }
  double slope = n >= 2 && n * sxx - sx * sx > 0 ? (n * sxy - sx * sy) / (n * sxx - sx * sx) : 0;
  double growth_mib = rss_at_warm < 0 ? 0 : (rss_max_warm - rss_at_warm) / 1024.0;
  std::cout << absl::StrFormat(
      "coordinator RSS: start %.1f MiB, at warm-up end (%.0f s) %.1f MiB, end %.1f MiB, max %.1f "
      "MiB; growth after warm-up %.1f MiB; slope after warm-up %.3f MiB/min (%d samples)\n",
      rss_start / 1024.0, warmup_s, rss_at_warm / 1024.0, rss_end / 1024.0, rss_max / 1024.0,
      growth_mib, slope, static_cast<int>(n));

  // No job lost, from both sides.
  double m_new = MetricSum(text, "pkb_jobs_submitted_total", "outcome=\"new\"");
  double m_joined = MetricSum(text, "pkb_jobs_submitted_total", "outcome=\"joined\"");
  double m_cached = MetricSum(text, "pkb_jobs_submitted_total", "outcome=\"cached\"");
  // Jobs the coordinator created itself: one confirmation run per result that could rank.
  double m_confirm = MetricSum(text, "pkb_jobs_submitted_total", "outcome=\"confirmation\"");
  double m_finished = MetricSum(text, "pkb_jobs_finished_total");
  double m_queue = MetricSum(text, "pkb_queue_depth"),
         m_running = MetricSum(text, "pkb_jobs_running");
  double m_lost = MetricSum(text, "pkb_leases_lost_total");
  int64_t lost = tally.accepted - tally.done;
  std::cout << absl::StrFormat(
      "client: sent %d in %.1f s (%.1f/s, pacing lag max %.1f ms), accepted %d, refused at "
      "Submit %d (expected), DONE %d, lost %d, unexpected ends %d, still in flight %d\n",
      tally.sent.load(), submit_s, tally.sent / submit_s, max_lag_ms, tally.accepted.load(),
      tally.refused.load(), tally.done.load(), lost, tally.unexpected.load(),
      tally.in_flight.load());
  std::cout << absl::StrFormat(
      "coordinator /metrics: submitted new %.0f + joined %.0f + cached %.0f = %.0f, and %.0f "
      "confirmation runs; finished %.0f (expected new + cached + confirmations = %.0f); queue "
      "depth %.0f, running %.0f, leases lost %.0f\n",
      m_new, m_joined, m_cached, m_new + m_joined + m_cached, m_confirm, m_finished,
      m_new + m_cached + m_confirm, m_queue,
      m_running, m_lost);

  bool ok = true;
  auto check = [&](bool c, const std::string& what) {
    std::cout << (c ? "PASS " : "FAIL ") << what << "\n";
    ok &= c;
  };
  check(!text.empty(), "scraped the coordinator's /metrics");
  check(lost == 0 && tally.unexpected == 0 && tally.in_flight == 0,
        "client: every accepted submission reached DONE with a verdict");
  check(m_new + m_joined + m_cached == tally.accepted,
        "coordinator counted every accepted submission");
  check(m_finished == m_new + m_cached + m_confirm && m_queue == 0 && m_running == 0,
        "coordinator finished every job it created (none queued or running)");
  if (max_rss_growth_mib > 0)
    check(growth_mib <= max_rss_growth_mib,
          absl::StrFormat("RSS after warm-up grew by at most %.0f MiB", max_rss_growth_mib));

  for (auto& w : ws) w->Stop();
  for (int i = 0; i < 100; ++i) {
    bool all = true;
    for (auto& w : ws) all &= w->done;
    if (all) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  std::cout << (ok ? "soak: OK" : "soak: FAILED") << std::endl;
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace pkb

int main(int argc, char** argv) { return pkb::Main(argc, argv); }
