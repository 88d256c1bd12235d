// The helpers every subcommand of pkb uses (cli.h).
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/cli.h"
#include "client/exit_codes.h"
#include "common/files.h"
#include "common/leaderboard_export.h"
#include "pkb/v1/admin.grpc.pb.h"
#include "pkb/v1/evaluation.grpc.pb.h"
#include "pkb/v1/leaderboard.grpc.pb.h"
#include "worker/engine/profiler.h"

namespace pkb::cli {

// Every call carries the token, when there is one.
void Authorize(const Globals& g, grpc::ClientContext* ctx) {
  if (!g.token.empty()) ctx->AddMetadata("authorization", "Bearer " + g.token);
}

// "2026-12-01", "2026-12-01T12:00:00Z" (RFC 3339) or microseconds since the epoch.
bool ParseWhen(const std::string& text, int64_t* micros) {
  absl::Time t;
  std::string err;
  if (absl::ParseTime("%Y-%m-%d", text, absl::UTCTimeZone(), &t, &err) ||
      absl::ParseTime(absl::RFC3339_full, text, &t, &err)) {
    *micros = absl::ToUnixMicros(t);
    return true;
  }
  return absl::SimpleAtoi(text, micros);
}

// SubmitRequest.language from a candidate's file name: C++ sources are host-only candidates.
std::string LanguageOfFile(const std::string& file) {
  std::string ext = std::filesystem::path(file).extension().string();
  return ext == ".cc" || ext == ".cpp" || ext == ".cxx" ? "cpp" : "cuda";
}

// Adds the result filter's options to a subcommand.
void AddFilterOptions(CLI::App* cmd, v1::ResultFilter* f) {
  cmd->add_option(
      "-p,--problem",
      [f](const CLI::results_t& r) {
        f->set_problem_id(std::stoi(r[0]));
        return true;
      },
      "problem id");
  cmd->add_option(
      "-w,--world-size",
      [f](const CLI::results_t& r) {
        f->set_world_size(std::stoi(r[0]));
        return true;
      },
      "world size");
  cmd->add_option("--gpu-class", *f->mutable_gpu_class(), "the class of the worker that ran it");
  cmd->add_option("--dtype", *f->mutable_dtype());
  cmd->add_option("--submitter", *f->mutable_submitter(), "the user");
  cmd->add_option("--model", *f->mutable_model());
  cmd->add_option("--agent", *f->mutable_agent());
  cmd->add_option("--tag", *f->mutable_tag());
  cmd->add_option(
      "--from",
      [f](const CLI::results_t& r) {
        int64_t t;
        if (!ParseWhen(r[0], &t)) return false;
        f->set_from_unix_micros(t);
        return true;
      },
      "finished at or after: YYYY-MM-DD, RFC 3339 or unix microseconds");
  cmd->add_option(
      "--to",
      [f](const CLI::results_t& r) {
        int64_t t;
        if (!ParseWhen(r[0], &t)) return false;
        f->set_to_unix_micros(t);
        return true;
      },
      "finished before");
  cmd->add_option(
      "--seeds",
      [f](const CLI::results_t& r) {
        if (r[0] == "any")
          f->set_seeds(v1::SEEDS_ANY);
        else if (r[0] == "public")
          f->set_seeds(v1::SEEDS_PUBLIC);
        else if (r[0] == "secret")
          f->set_seeds(v1::SEEDS_SECRET);
        else
          return false;
        return true;
      },
      "any, public or secret (ranked runs)");
}

int ExitForRpc(const grpc::Status& st) {
  switch (st.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return kExitUnavailable;
    case grpc::StatusCode::NOT_FOUND:
      return kExitNotFound;
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::PERMISSION_DENIED:
      return kExitDenied;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return kExitUnavailable;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
      return kExitInvalid;
    default:
      return kExitError;
  }
}

int Fail(const grpc::Status& st, const Globals& g) {
  if (g.json) {
    std::cout << "{\"error\":{\"code\":" << static_cast<int>(st.error_code()) << ",\"message\":\""
              << absl::StrReplaceAll(st.error_message(), {{"\\", "\\\\"}, {"\"", "\\\""}}) << "\"}}"
              << std::endl;
  }
  std::cerr << "pkb: " << st.error_message() << " (gRPC code " << static_cast<int>(st.error_code())
            << ")\n";
  return ExitForRpc(st);
}

std::shared_ptr<grpc::Channel> Dial(const Globals& g) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  if (!g.tls_ca.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ReadFile(g.tls_ca).value_or("");
    return grpc::CreateCustomChannel(g.coordinator, grpc::SslCredentials(ssl), args);
  }
  return grpc::CreateCustomChannel(g.coordinator, grpc::InsecureChannelCredentials(), args);
}

void PrintResult(const v1::EvalResult& r) {
  std::printf("verdict: %s%s — %s\n", v1::Status_Name(r.status()).c_str(),
              r.cached() ? " (cached)" : "", r.message().c_str());
  for (const auto& d : r.policy_findings()) {
    std::printf("  POLICY %s:%d: %s\n", d.file().c_str(), d.line(), d.message().c_str());
  }
  if (r.has_compile()) {
    for (const auto& d : r.compile().diagnostics()) {
      std::printf("  %s:%d:%d: %s: %s\n", d.file().c_str(), d.line(), d.column(),
                  d.severity().c_str(), d.message().c_str());
    }
  }
  int shown = 0;
  for (const auto& rt : r.rank_trials()) {
    if (rt.ok() || shown >= 8) continue;
    ++shown;
    std::printf("  rank %d trial %d: %s\n", rt.rank(), rt.trial(), rt.error().c_str());
    for (const auto& o : rt.outputs()) {
      if (o.ok()) continue;
      std::printf(
          "    output %d %s: %s max_abs %.3g max_rel %.3g bad %lld/%lld (first at %lld: want %.6g "
          "got %.6g)"
          " nan %lld unwritten %lld\n",
          o.index(), o.name().c_str(), o.problem().c_str(), o.max_abs_error(), o.max_rel_error(),
          static_cast<long long>(o.bad_count()), static_cast<long long>(o.numel()),
          static_cast<long long>(o.first_bad_index()), o.expected_at_first_bad(),
          o.actual_at_first_bad(), static_cast<long long>(o.nan_count()),
          static_cast<long long>(o.unwritten_count()));
    }
  }
  if (r.status() == v1::OK && r.functional()) {
    std::printf(
        "  functional run: no speedup; the candidate's %.2f us per call is not comparable "
        "(a short window%s)\n",
        r.candidate().wall_per_iter_us(),
        r.gpus_used() > 0
            ? absl::StrFormat(", %d rank(s) on %d GPU(s)", r.world_size(), r.gpus_used()).c_str()
            : "");
  } else if (r.status() == v1::OK) {
    // The candidate's rounds (their median is its figure), where it ran several.
    std::string rounds;
    const auto& cr = r.candidate().round_wall_per_iter_us();
    if (cr.size() > 1) {
      rounds = absl::StrFormat(" (median of %d rounds, %.2f-%.2f)", cr.size(),
                               *std::min_element(cr.begin(), cr.end()),
                               *std::max_element(cr.begin(), cr.end()));
    }
    std::printf(
        "  candidate %.2f us per call%s, baseline %.2f us (the judge's clock%s), speedup %.3fx "
        "(%.3fx-%.3fx; PKB's events figure %.3fx)\n",
        r.candidate().wall_per_iter_us(), rounds.c_str(),
        r.baseline_node_samples() > 0 ? r.baseline_node_us() : r.baseline().wall_per_iter_us(),
        r.baseline_node_samples() > 0 ? "; the node's median" : "", r.speedup(), r.speedup_low(),
        r.speedup_high(), r.speedup_events());
    if (r.compiles_beside() > 0) {
      std::printf(
          "  %d compile(s) ran on the node beside this job (the worker's stopped before its "
          "timing): its own measurement of the reference stays out of the node's baseline\n",
          r.compiles_beside());
    } else if (r.compiles_beside() < 0) {
      std::printf(
          "  timed without the worker's word that its other work was stopped: its own "
          "measurement of the reference stays out of the node's baseline\n");
    }
    if (r.roofline().busbw_gbps() > 0) {
      std::printf("  algbw %.1f GB/s, busbw %.1f GB/s, %.1f%% of the NVLink roofline\n",
                  r.roofline().algbw_gbps(), r.roofline().busbw_gbps(),
                  r.roofline().percent_of_roofline());
    }
  }
  if (r.status() == v1::OK) {
    for (absl::string_view line : absl::StrSplit(ProfileText(r, 12), '\n', absl::SkipEmpty())) {
      std::printf("  %.*s\n", static_cast<int>(line.size()), line.data());
    }
  }
  if (!r.confirmation_job_id().empty() && r.shape_job_ids().empty()) {
    std::printf(
        "  confirmation run: job %s times it again; it ranks once that run is OK too, with the "
        "lower of the two speedups (pkb watch %s)\n",
        r.confirmation_job_id().c_str(), r.confirmation_job_id().c_str());
  }
  if (!r.confirmation_job_id().empty() && !r.shape_job_ids().empty()) {
    std::printf(
        "  confirmation run: job %s times it again, and shape runs %s time it at other shapes; "
        "it ranks once all are OK too, with the geometric mean over the shapes (pkb history "
        "shows each figure)\n",
        r.confirmation_job_id().c_str(), absl::StrJoin(r.shape_job_ids(), ", ").c_str());
  }
  if (r.shape_run()) {
    std::printf("  a shape run of job %s\n", r.confirms_job_id().c_str());
  } else if (!r.confirms_job_id().empty()) {
    std::printf("  a confirmation run of job %s\n", r.confirms_job_id().c_str());
  }
  if (!r.failed_rank_log().empty()) std::printf("  log tail:\n%s\n", r.failed_rank_log().c_str());
}

// The shapes of a result with shape runs: "1024x1024 1.600x, 512x2048 1.200x, 1536x1024 -".
std::string DescribeShapes(const v1::Confirmation& c) {
  std::vector<std::string> parts;
  for (const v1::ShapeFigure& f : c.shapes()) {
    std::string figure = "-";
    if (f.stage() == v1::DONE && f.status() == v1::OK) {
      figure = absl::StrFormat("%.3fx", f.speedup());
    } else if (f.stage() == v1::DONE) {
      figure = v1::Status_Name(f.status());
    } else {
      figure = "pending";
    }
    parts.push_back(absl::StrFormat("%dx%d %s", f.m(), f.n(), figure));
  }
  return absl::StrJoin(parts, ", ");
}

// "confirmed 1.600x (2.000x, then 1.600x)", "pending: ...", for boards and histories.
std::string DescribeConfirmation(const v1::Confirmation& c) {
  switch (c.state()) {
    case v1::CONFIRMED:
      if (c.shapes_size() > 0) {
        return absl::StrFormat(
            "confirmed %.3fx, the geometric mean over shapes (%s; the default shape %.3fx, "
            "then %.3fx in job %s)",
            c.speedup(), DescribeShapes(c), c.first_speedup(), c.confirmation_speedup(),
            c.job_id());
      }
      return absl::StrFormat("confirmed %.3fx (%.3fx, then %.3fx in job %s)", c.speedup(),
                             c.first_speedup(), c.confirmation_speedup(), c.job_id());
    case v1::CONFIRMATION_PENDING:
      if (c.shapes_size() > 0)
        return absl::StrCat("pending: ", c.reason(), " (", DescribeShapes(c), ")");
      return absl::StrCat("pending: ", c.reason());
    case v1::CONFIRMATION_FAILED:
      return absl::StrCat("not confirmed: ", c.reason());
    case v1::UNCONFIRMED:
      return "unconfirmed (finished before confirmation runs)";
    default:
      return "";
  }
}

void PrintEvent(const v1::EvalEvent& e, absl::Time start) {
  double t = absl::ToDoubleSeconds(absl::Now() - start);
  std::string extra;
  // Trial events carry their own words ("trial 2/5 correct on every rank"); mark failures.
  if (e.stage() == v1::VERIFYING && e.trial() >= 0 && !e.trial_ok()) extra = " FAILED";
  if (e.stage() != v1::DONE) {
    std::printf("[%6.1fs] %-12s%s %s\n", t, v1::Stage_Name(e.stage()).c_str(), extra.c_str(),
                e.message().c_str());
  } else {
    std::printf("[%6.1fs] DONE\n", t);
    PrintResult(e.result());
  }
  std::fflush(stdout);
}

// Waits for the channel to connect, at most --connect-timeout; the only deadline a follow has.
bool Connect(const Globals& g, grpc::Channel* channel) {
  return channel->WaitForConnected(
      std::chrono::system_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(g.connect_timeout_s * 1000)));
}

// A broken stream worth reattaching to: the coordinator restarted or the network dropped.
bool Transient(const grpc::Status& st) {
  switch (st.error_code()) {
    case grpc::StatusCode::OK:  // ended before DONE (the coordinator shut down)
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::ABORTED:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return true;
    default:
      return false;
  }
}

// Streams a job's events (Submit or Watch) until DONE, however long the job takes: only connecting
// has a deadline (--connect-timeout). A broken stream reattaches with Watch from the last sequence
// seen (a Submit cut before its first event is sent again: an identical job in flight is joined),
// backing off while the coordinator is away, for at most --follow-timeout seconds in a row.
// Returns the exit code of the verdict.
// Follows one job to its DONE (submitting it first when `submit` is given); its verdict goes to
// `done` when given.
int Stream(const Globals& g, grpc::Channel* channel, v1::Evaluation::Stub* stub,
           const v1::SubmitRequest* submit, std::string job_id, bool detach, v1::EvalResult* done) {
  absl::Time start = absl::Now();
  int64_t last_seq = 0;
  absl::Duration backoff = absl::Milliseconds(200);
  absl::Time broken_since = absl::InfiniteFuture();
  while (true) {
    grpc::Status st;
    if (!Connect(g, channel)) {
      st = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        absl::StrCat("cannot reach ", g.coordinator, " within ",
                                     g.connect_timeout_s, " s (--connect-timeout)"));
    } else {
      grpc::ClientContext ctx;
      Authorize(g, &ctx);
      std::unique_ptr<grpc::ClientReader<v1::EvalEvent>> reader;
      if (submit != nullptr && job_id.empty()) {
        reader = stub->Submit(&ctx, *submit);
      } else {
        v1::WatchRequest w;
        w.set_job_id(job_id);
        w.set_after_sequence(last_seq);
        reader = stub->Watch(&ctx, w);
      }
      v1::EvalEvent e;
      while (reader->Read(&e)) {
        broken_since = absl::InfiniteFuture();
        backoff = absl::Milliseconds(200);
        if (job_id.empty()) {
          job_id = e.job_id();
          if (!g.json) std::printf("job %s\n", job_id.c_str());
        }
        if (e.sequence() <= last_seq) continue;  // replayed after a reattach
        last_seq = e.sequence();
        if (g.json) {
          std::cout << ToJson(e) << std::endl;
        } else {
          PrintEvent(e, start);
        }
        if (e.stage() == v1::DONE) {
          ctx.TryCancel();
          if (done) *done = e.result();
          return ExitCodeFor(e.result().status());
        }
        if (detach) {
          ctx.TryCancel();
          return kExitOk;
        }
      }
      st = reader->Finish();
    }
    const bool resubmit = job_id.empty() && submit != nullptr && !submit->no_cache();
    if (!Transient(st) || (job_id.empty() && !resubmit)) return Fail(st, g);
    absl::Time now = absl::Now();
    if (broken_since == absl::InfiniteFuture()) broken_since = now;
    if (now - broken_since > absl::Seconds(g.follow_timeout_s)) {
      std::cerr << "pkb: the coordinator has been unreachable for " << g.follow_timeout_s
                << " s (--follow-timeout): " << st.error_message() << "\n";
      if (job_id.empty()) return Fail(st, g);
      std::cerr << "pkb: job " << job_id << " may still run: `pkb watch " << job_id
                << "` follows it\n";
      return kExitNotDone;
    }
    std::cerr << "pkb: stream lost (" << st.error_message() << "); "
              << (job_id.empty() ? "submitting again" : "reattaching to " + job_id) << "\n";
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(5));
  }
}

// The candidate's text, or a usage error naming the file.
absl::StatusOr<std::string> ReadSource(const std::string& file) {
  auto source = ReadFile(file);
  if (!source.ok()) std::cerr << "pkb: " << source.status().message() << "\n";
  return source;
}

}  // namespace pkb::cli
