#include "server/public_submission.h"

#include <catch2/catch.hpp>
#include <set>
#include <string>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "common/leaderboard_export.h"

namespace pkb {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

constexpr const char* kMarker = "SECRET_FROM_THE_SOURCE";

// The only text fields the public view may carry: ids, the problem, the device and the
// submitter's metadata. Every other string in a Submission, today's or one added later, must
// stay out.
const std::set<std::string>& PublicText() {
  static const auto* names = new std::set<std::string>{
      "pkb.v1.Job.job_id",
      "pkb.v1.Job.harness_version",
      "pkb.v1.Job.cached_from_job_id",
      "pkb.v1.Job.gpu_class",
      "pkb.v1.SubmitRequest.dtype",
      "pkb.v1.SubmitRequest.gpu_class",
      "pkb.v1.EvalSpec.dtype",
      "pkb.v1.EvalSpec.gpu_class",
      "pkb.v1.SubmitRequest.submitter",
      "pkb.v1.SubmitRequest.model",
      "pkb.v1.SubmitRequest.agent",
      "pkb.v1.SubmitRequest.tags",
      "pkb.v1.EvalResult.problem_slug",
      "pkb.v1.EvalResult.dtype",
      "pkb.v1.EvalResult.gpu",
      "pkb.v1.EvalResult.harness_version",
      "pkb.v1.EvalEvent.job_id",
      "pkb.v1.OutputCheck.name",
      "pkb.v1.Submission.not_ranked_reason",
      "pkb.v1.Job.confirms_job_id",
      "pkb.v1.Job.confirmation_job_id",
      "pkb.v1.EvalResult.confirmation_job_id",
      "pkb.v1.EvalResult.confirms_job_id",
      "pkb.v1.Confirmation.job_id",
      "pkb.v1.Confirmation.reason",
      "pkb.v1.Job.shape_job_ids",
      "pkb.v1.EvalResult.shape_job_ids",
      "pkb.v1.ShapeFigure.job_id",
  };
  return *names;
}

// Sets every field of `m`, recursively: public text fields to their own name, every other string
// (map keys included) to the marker, numbers to 7, bools to false, enums to their last value.
void FillEverything(Message* m, int depth = 0) {
  const google::protobuf::Descriptor* d = m->GetDescriptor();
  const google::protobuf::Reflection* r = m->GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    const std::string text = PublicText().count(f->full_name()) ? f->name() : kMarker;
    const bool repeated = f->is_repeated();
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_STRING:
        repeated ? r->AddString(m, f, text) : r->SetString(m, f, text);
        break;
      case FieldDescriptor::CPPTYPE_MESSAGE:
        if (depth < 5)
          FillEverything(repeated ? r->AddMessage(m, f) : r->MutableMessage(m, f), depth + 1);
        break;
      case FieldDescriptor::CPPTYPE_INT32:
        repeated ? r->AddInt32(m, f, 7) : r->SetInt32(m, f, 7);
        break;
      case FieldDescriptor::CPPTYPE_INT64:
        repeated ? r->AddInt64(m, f, 7) : r->SetInt64(m, f, 7);
        break;
      case FieldDescriptor::CPPTYPE_UINT32:
        repeated ? r->AddUInt32(m, f, 7) : r->SetUInt32(m, f, 7);
        break;
      case FieldDescriptor::CPPTYPE_UINT64:
        repeated ? r->AddUInt64(m, f, 7) : r->SetUInt64(m, f, 7);
        break;
      case FieldDescriptor::CPPTYPE_DOUBLE:
        repeated ? r->AddDouble(m, f, 7) : r->SetDouble(m, f, 7);
        break;
      case FieldDescriptor::CPPTYPE_FLOAT:
        repeated ? r->AddFloat(m, f, 7) : r->SetFloat(m, f, 7);
        break;
      case FieldDescriptor::CPPTYPE_BOOL:
        repeated ? r->AddBool(m, f, false) : r->SetBool(m, f, false);
        break;
      case FieldDescriptor::CPPTYPE_ENUM: {
        const auto* e = f->enum_type()->value(f->enum_type()->value_count() - 1);
        repeated ? r->AddEnum(m, f, e) : r->SetEnum(m, f, e);
        break;
      }
    }
  }
}

TEST_CASE("the public view of a submission carries no text but its allow-list", "[public][http]") {
  v1::Submission s;
  FillEverything(&s);
  s.mutable_job()->mutable_result()->set_status(v1::MISMATCH);
  // The reference's kernels are the problem's, named by the judge: public.
  auto name_reference = [](v1::EvalResult* r) {
    for (auto& prof : *r->mutable_profiles()) {
      for (auto& rec : *prof.mutable_reference()->mutable_records()) rec.set_name("ncclKernel");
    }
  };
  name_reference(s.mutable_job()->mutable_result());
  for (auto& e : *s.mutable_events()) name_reference(e.mutable_result());
  REQUIRE(ToJson(s).find(kMarker) != std::string::npos);
  const v1::Submission pub = PublicSubmission(s);
  const std::string json = ToJson(pub);
  CHECK(json.find(kMarker) == std::string::npos);
  CHECK(SubmissionCsv(pub).find(kMarker) == std::string::npos);
  // What is public stays.
  CHECK(pub.job().request().model() == "model");
  CHECK(pub.job().request().tags(0) == "tags");
  CHECK(pub.job().request().problem_id() == 7);
  CHECK(pub.job().request().source().empty());
  CHECK(pub.job().source_sha256().empty());
  CHECK(pub.job().job_key().empty());
  CHECK(pub.job().worker_id().empty());
  CHECK(pub.job().last_loss_reason().empty());
  const v1::EvalResult& r = pub.job().result();
  CHECK(r.message() == "MISMATCH on rank 7, trial 7");
  CHECK(r.candidate().median_us() == 7);
  CHECK(r.roofline().busbw_gbps() == 7);
  CHECK(r.rank_trials(0).outputs(0).max_abs_error() == 7);
  CHECK(r.rank_trials(0).outputs(0).name() == "name");
  CHECK(r.rank_trials(0).outputs(0).problem() == "not compared");
  CHECK(r.compile().seconds() == 7);
  CHECK(r.compile().log().empty());
  CHECK(r.compile().diagnostics().empty());
  CHECK(r.stage_seconds().empty());  // the only key was not a stage's name
  // The candidate's kernels numbered, its copies' names from the fixed list, times kept.
  REQUIRE(r.profiles_size() == 1);
  CHECK(r.profiles(0).candidate().records(0).name() == "memset");  // the enum's last kind
  CHECK(r.profiles(0).candidate().records(0).duration_us() == 7);
  CHECK(r.profiles(0).reference().records(0).name() == "ncclKernel");
  CHECK(r.profiles(0).candidate().note().empty());
  CHECK(pub.events(0).job_id() == "job_id");
  CHECK(pub.events(0).sequence() == 7);
}

TEST_CASE("free text is replaced by fixed text from the verdict", "[public][http]") {
  v1::EvalResult r;
  r.set_status(v1::COMPILE_ERROR);
  r.set_message("candidate.cu:3: 'leaky_name' was not declared");
  CHECK(PublicResult(r).message() == "COMPILE_ERROR: the source did not compile");
  r.set_status(v1::OK);
  (*r.mutable_stage_seconds())["verify"] = 0.5;
  (*r.mutable_stage_seconds())["leaky_name"] = 1;
  CHECK(PublicResult(r).message() == "OK: correct on every rank in every trial");
  CHECK(PublicResult(r).stage_seconds().size() == 1);
  CHECK(PublicResult(r).stage_seconds().at("verify") == 0.5);
  v1::CallProfile* cand = r.add_profiles()->mutable_candidate();
  cand->add_records()->set_name("leaky_name_kernel<4>");
  cand->add_records()->set_name("leaky_name_kernel<8>");
  v1::ProfileRecord* copy = cand->add_records();
  copy->set_kind(v1::ProfileRecord::MEMCPY);
  copy->set_name("copy peer to peer");
  cand->mutable_records(0)->set_kind(v1::ProfileRecord::KERNEL);
  cand->mutable_records(1)->set_kind(v1::ProfileRecord::KERNEL);
  const v1::CallProfile pub = PublicResult(r).profiles(0).candidate();
  CHECK(pub.records(0).name() == "kernel 1");
  CHECK(pub.records(1).name() == "kernel 2");
  CHECK(pub.records(2).name() == "copy peer to peer");
  r.clear_profiles();

  r.set_status(v1::RUNTIME_ERROR);
  v1::RankTrial* passed = r.add_rank_trials();
  passed->set_rank(0);
  passed->set_ok(true);
  v1::RankTrial* failed = r.add_rank_trials();
  failed->set_rank(1);
  failed->set_trial(2);
  failed->set_error("leaky_name threw");
  CHECK(PublicVerdictMessage(r) == "RUNTIME_ERROR on rank 1, trial 2");
  CHECK(PublicResult(r).rank_trials(1).error().empty());

  v1::EvalEvent e;
  e.set_stage(v1::VERIFYING);
  e.set_trial(3);
  e.set_message("rank 1: leaky_name");
  CHECK(PublicEvent(e).message() == "trial 3 failed");
  e.set_trial_ok(true);
  CHECK(PublicEvent(e).message() == "trial 3 ok");
  e.set_stage(v1::COMPILING);
  CHECK(PublicEvent(e).message() == "compiling");
  e.set_stage(v1::DONE);
  *e.mutable_result() = r;
  CHECK(PublicEvent(e).message() == "RUNTIME_ERROR on rank 1, trial 2");
  CHECK(ToJson(PublicEvent(e)).find("leaky_name") == std::string::npos);
}

}  // namespace
}  // namespace pkb
