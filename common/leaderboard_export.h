// Leaderboard answers as CSV (RFC 4180: comma-separated, CRLF-free "\n" rows, fields quoted when
// they hold a comma, quote or newline) and as proto3 JSON, for papers and spreadsheets. Used by
// `pkb leaderboard|suite|submissions|history --csv/--json` and the coordinator's HTTP endpoints.
// Times are UTC, ISO 8601 ("2026-12-03T07:40:00.123456Z"); speedups and times keep full precision.
//
//   std::string csv = LeaderboardCsv(answer);   // one row per entry, header first
#ifndef PKB_COMMON_LEADERBOARD_EXPORT_H_
#define PKB_COMMON_LEADERBOARD_EXPORT_H_

#include <string>

#include "google/protobuf/message.h"
#include "pkb/v1/leaderboard.pb.h"

namespace pkb {

// One row per entry of every board.
std::string LeaderboardCsv(const v1::LeaderboardAnswer& answer);
// One row per model: model, tasks, tasks_correct, geomean_speedup, then fast_<p> per threshold.
std::string SuiteCsv(const v1::SuiteAnswer& answer);
// One row per submission.
std::string SubmissionsCsv(const v1::ListSubmissionsAnswer& answer);
// A run: one row per event of the submission, the verdict's fields on the DONE row.
std::string SubmissionCsv(const v1::Submission& submission);
// proto3 JSON (field names in lowerCamelCase, enums by name, 64-bit integers as strings).
// `include_defaults`: print fields that hold their zero value too (proto3 JSON leaves them out),
// so that a reader need not know the defaults.
std::string ToJson(const google::protobuf::Message& message, bool pretty = false,
                   bool include_defaults = false);
// One CSV field, quoted when needed.
std::string CsvField(const std::string& value);
std::string IsoTime(int64_t unix_micros);  // "" for 0

}  // namespace pkb

#endif  // PKB_COMMON_LEADERBOARD_EXPORT_H_
