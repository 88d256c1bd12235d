// What the public web leaderboard may show of one submission. Built from an allow-list: the
// public view starts empty and copies in only fields that cannot carry text of a submission, its
// compiler, its rank logs or a worker (the verdict, numbers, timings, the problem and its shape,
// and the submitter's metadata as stored). A field added to pkb.v1.Job, EvalResult or EvalEvent
// later stays private until it is added here. Free-text messages are replaced by fixed text made
// from the verdict ("MISMATCH on rank 1, trial 2"), because a compiler error or a candidate's
// own error text can quote its source.
//
//   v1::Submission pub = PublicSubmission(*store_submission);
//
// Left out: the source and its hashes (source_sha256, job_key: they fingerprint the source), the
// compiler's command, log and diagnostics, rank errors, output-check reasons, the failing rank's
// log, the worker's id and the lease loss reason.
#ifndef PKB_SERVER_PUBLIC_SUBMISSION_H_
#define PKB_SERVER_PUBLIC_SUBMISSION_H_

#include <string>

#include "pkb/v1/evaluation.pb.h"
#include "pkb/v1/leaderboard.pb.h"
#include "pkb/v1/result.pb.h"

namespace pkb {

v1::Submission PublicSubmission(const v1::Submission& submission);
v1::Job PublicJob(const v1::Job& job);
v1::EvalResult PublicResult(const v1::EvalResult& result);
v1::EvalEvent PublicEvent(const v1::EvalEvent& event);

// The fixed sentence that stands for a verdict's message: the status, and for a failure the
// first failing rank and trial where the result names one.
std::string PublicVerdictMessage(const v1::EvalResult& result);

}  // namespace pkb

#endif  // PKB_SERVER_PUBLIC_SUBMISSION_H_
