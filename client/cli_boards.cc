// pkb's subcommands for problems, boards and histories (cli.h).
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

Command AddProblemsList(CLI::App& problems) {
  auto* cmd = problems.add_subcommand("list", "every problem, one a line");
  return {cmd, [](Session& s) -> int {
            grpc::ClientContext ctx;
            s.Prepare(&ctx);
            v1::ProblemCatalog catalog;
            grpc::Status st = s.stub->ListProblems(&ctx, v1::ListProblemsRequest(), &catalog);
            if (!st.ok()) return Fail(st, s.g);
            for (const auto& p : catalog.problems()) {
              if (s.g.json) {
                std::cout << ToJson(p) << std::endl;
                continue;
              }
              std::string ws;
              for (const auto& l : p.layouts()) {
                if (l.supported()) absl::StrAppend(&ws, ws.empty() ? "" : ",", l.world_size());
              }
              std::printf("%3d  %-36s %-16s W=%s\n", p.id(), p.slug().c_str(), p.category().c_str(),
                          ws.c_str());
            }
            return kExitOk;
          }};
}

Command AddProblemShow(CLI::App& problems) {
  auto which = std::make_shared<std::string>();
  auto source = std::make_shared<bool>(false);
  auto* cmd = problems.add_subcommand("show", "one problem's full spec");
  cmd->add_option("problem", *which, "id or slug")->required();
  cmd->add_flag("--source", *source,
                "print the problem's own code (inputs, reference, oracle) instead of the spec");
  return {cmd, [which, source](Session& s) -> int {
            grpc::ClientContext ctx;
            s.Prepare(&ctx);
            v1::GetProblemRequest r;
            int id = 0;
            if (absl::SimpleAtoi(*which, &id)) {
              r.set_id(id);
            } else {
              r.set_slug(*which);
            }
            v1::ProblemSpec spec;
            grpc::Status st = s.stub->GetProblem(&ctx, r, &spec);
            if (!st.ok()) return Fail(st, s.g);
            if (s.g.json) {
              std::cout << ToJson(spec) << std::endl;
              return kExitOk;
            }
            if (*source) {
              for (const v1::SourceFile& f : spec.sources())
                std::printf("// ==== %s\n%s\n", f.path().c_str(), f.text().c_str());
              return kExitOk;
            }
            std::printf("%d %s (version %d)\n\n%s\n\n", spec.id(), spec.slug().c_str(),
                        spec.version(), spec.statement().c_str());
            std::printf("reference time per call on this service (default shape and dtype):\n");
            if (spec.reference_times().empty()) std::printf("  none measured yet\n");
            for (const v1::ReferenceTime& t : spec.reference_times()) {
              std::printf("  W=%d %-8s median %.2f us (p10 %.2f, p90 %.2f; %d results)",
                          t.world_size(), t.gpu_class().c_str(), t.median_us(), t.p10_us(),
                          t.p90_us(), t.samples());
              if (t.graph_median_us() > 0)
                std::printf("; as a CUDA graph %.2f us", t.graph_median_us());
              std::printf("\n");
            }
            std::printf("code: %d file(s) (pkb problems show %d --source)\n\n", spec.sources_size(),
                        spec.id());
            spec.clear_sources();
            std::string out;
            google::protobuf::util::JsonPrintOptions o;
            o.add_whitespace = true;
            (void)google::protobuf::util::MessageToJsonString(spec, &out, o);
            std::printf("%s", out.c_str());
            return kExitOk;
          }};
}

Command AddLeaderboard(CLI::App& app) {
  struct Options {
    v1::LeaderboardQuery q;
    bool csv = false;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "leaderboard", "per board (problem, W, dtype, GPU class) the best result per user or model");
  AddFilterOptions(cmd, o->q.mutable_filter());
  cmd->add_option(
      "--by",
      [o](const CLI::results_t& r) {
        if (r[0] == "user")
          o->q.set_group_by(v1::GROUP_BY_USER);
        else if (r[0] == "model")
          o->q.set_group_by(v1::GROUP_BY_MODEL);
        else
          return false;
        return true;
      },
      "user (default) or model");
  cmd->add_option(
      "--limit",
      [o](const CLI::results_t& r) {
        o->q.set_limit(std::stoi(r[0]));
        return true;
      },
      "entries per board");
  cmd->add_flag("--csv", o->csv, "print CSV");
  return {cmd, [o](Session& s) -> int {
            auto lstub = v1::Leaderboard::NewStub(s.channel);
            grpc::ClientContext ctx;
            s.Prepare(&ctx);
            v1::LeaderboardAnswer a;
            grpc::Status st = lstub->Query(&ctx, o->q, &a);
            if (!st.ok()) return Fail(st, s.g);
            if (o->csv || s.g.json) {
              std::cout << (o->csv ? LeaderboardCsv(a) : ToJson(a) + "\n") << std::flush;
              return kExitOk;
            }
            for (const auto& b : a.boards()) {
              std::printf("%d %s  W=%d %s %s\n", b.problem_id(), b.problem_slug().c_str(),
                          b.world_size(), b.dtype().c_str(), b.gpu_class().c_str());
              auto row = [](const std::string& rank, const v1::LeaderboardEntry& e) {
                std::printf("  %3s %-9.3f %-12.2f %-12.2f %-16s %-20s %s%s  %s\n", rank.c_str(),
                            e.speedup(), e.candidate_median_us(), e.baseline_median_us(),
                            e.submitter().c_str(), e.model().c_str(), e.job_id().c_str(),
                            e.ranked() ? " (secret seed)" : "",
                            DescribeConfirmation(e.confirmation()).c_str());
              };
              for (const auto& e : b.entries()) row(absl::StrCat(e.rank()), e);
              for (const auto& e : b.pending()) row("-", e);
            }
            std::printf(
                "%d boards from %d ranking results (%d disqualified, %d pending confirmation, "
                "%d not confirmed)\n",
                a.boards_size(), a.ranking_results(), a.disqualified_results(), a.pending_results(),
                a.unconfirmed_results());
            return kExitOk;
          }};
}

Command AddSuite(CLI::App& app) {
  struct Options {
    v1::SuiteQuery q;
    bool csv = false;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "suite", "fast_p (p = 0, 1, 1.5, 2) and geomean speedup per model over the suite");
  AddFilterOptions(cmd, o->q.mutable_filter());
  cmd->add_option(
         "--p",
         [o](const CLI::results_t& r) {
           for (const auto& v : r) o->q.add_p(std::stod(v));
           return true;
         },
         "thresholds p (repeat)")
      ->expected(1, 16);
  cmd->add_flag("--csv", o->csv, "print CSV");
  return {cmd, [o](Session& s) -> int {
            auto lstub = v1::Leaderboard::NewStub(s.channel);
            grpc::ClientContext ctx;
            s.Prepare(&ctx);
            v1::SuiteAnswer a;
            grpc::Status st = lstub->Suite(&ctx, o->q, &a);
            if (!st.ok()) return Fail(st, s.g);
            if (o->csv || s.g.json) {
              std::cout << (o->csv ? SuiteCsv(a) : ToJson(a) + "\n") << std::flush;
              return kExitOk;
            }
            std::printf("%d tasks\n%-24s %-8s %-9s", a.tasks(), "model", "correct", "geomean");
            if (a.models_size() > 0) {
              for (const auto& f : a.models(0).fast_p()) std::printf(" fast_%-6g", f.p());
            }
            std::printf("\n");
            for (const auto& m : a.models()) {
              std::printf("%-24s %-8d %-9.3f", m.model().c_str(), m.tasks_correct(),
                          m.geomean_speedup());
              for (const auto& f : m.fast_p()) std::printf(" %-11.3f", f.fast_p());
              std::printf("\n");
            }
            return kExitOk;
          }};
}

Command AddSubmissions(CLI::App& app) {
  struct Options {
    v1::ListSubmissionsRequest r;
    bool csv = false;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("submissions", "submissions, newest first (agents: their own)");
  AddFilterOptions(cmd, o->r.mutable_filter());
  cmd->add_flag(
      "--done", [o](int64_t) { o->r.set_done_only(true); }, "finished ones only");
  cmd->add_option(
      "--limit",
      [o](const CLI::results_t& r) {
        o->r.set_limit(std::stoi(r[0]));
        return true;
      },
      "at most this many (default 1000)");
  cmd->add_flag("--csv", o->csv, "print CSV");
  return {cmd, [o](Session& s) -> int {
            auto lstub = v1::Leaderboard::NewStub(s.channel);
            grpc::ClientContext ctx;
            s.Prepare(&ctx);
            v1::ListSubmissionsAnswer a;
            grpc::Status st = lstub->ListSubmissions(&ctx, o->r, &a);
            if (!st.ok()) return Fail(st, s.g);
            if (o->csv || s.g.json) {
              std::cout << (o->csv ? SubmissionsCsv(a) : ToJson(a) + "\n") << std::flush;
              return kExitOk;
            }
            for (const auto& sub : a.submissions()) {
              std::printf("%s  %3d W=%d %-14s %-8.3f %-12s %-16s %s\n", sub.job_id().c_str(),
                          sub.problem_id(), sub.world_size(),
                          (sub.stage() == v1::DONE ? v1::Status_Name(sub.status())
                                                   : v1::Stage_Name(sub.stage()))
                              .c_str(),
                          sub.speedup(), sub.submitter().c_str(), sub.model().c_str(),
                          IsoTime(sub.created_unix_micros()).c_str());
            }
            return kExitOk;
          }};
}

Command AddHistory(CLI::App& app) {
  struct Options {
    std::string job_id;
    bool with_source = false, csv = false;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("history", "a submission's every event and its verdict");
  cmd->add_option("job_id", o->job_id)->required();
  cmd->add_flag("--source", o->with_source, "include the candidate's source (JSON)");
  cmd->add_flag("--csv", o->csv, "print CSV: one row per event");
  return {cmd, [o](Session& s) -> int {
            auto lstub = v1::Leaderboard::NewStub(s.channel);
            grpc::ClientContext ctx;
            s.Prepare(&ctx);
            v1::GetSubmissionRequest r;
            r.set_job_id(o->job_id);
            r.set_include_source(o->with_source);
            v1::Submission sub;
            grpc::Status st = lstub->GetSubmission(&ctx, r, &sub);
            if (!st.ok()) return Fail(st, s.g);
            if (o->csv || s.g.json) {
              std::cout << (o->csv ? SubmissionCsv(sub) : ToJson(sub) + "\n") << std::flush;
              return kExitOk;
            }
            const auto& rq = sub.job().request();
            std::printf("job %s: problem %d W=%d, submitter %s, model %s, agent %s%s\n",
                        sub.job().job_id().c_str(), rq.problem_id(), rq.world_size(),
                        rq.submitter().c_str(), rq.model().c_str(), rq.agent().c_str(),
                        rq.ranked()     ? ", ranked (secret seed)"
                        : rq.practice() ? ", practice"
                                        : "");
            for (const auto& e : sub.events()) {
              std::printf("  %s %-12s %s\n", IsoTime(e.unix_micros()).c_str(),
                          v1::Stage_Name(e.stage()).c_str(), e.message().c_str());
            }
            if (sub.job().stage() == v1::DONE) {
              PrintResult(sub.job().result());
              const std::string confirmation = DescribeConfirmation(sub.confirmation());
              if (!confirmation.empty()) std::printf("confirmation: %s\n", confirmation.c_str());
              std::printf("%s\n", sub.ranks()
                                      ? "ranks on the leaderboard"
                                      : ("does not rank: " + sub.not_ranked_reason()).c_str());
            }
            return kExitOk;
          }};
}

}  // namespace pkb::cli
