#include "worker/engine/profiler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace pkb {

const char* TransferName(Transfer t) {
  switch (t) {
    case Transfer::kHostToDevice: return "copy host to device";
    case Transfer::kDeviceToHost: return "copy device to host";
    case Transfer::kDeviceToDevice: return "copy device to device";
    case Transfer::kPeerToPeer: return "copy peer to peer";
    case Transfer::kHostToHost: return "copy host to host";
    case Transfer::kOtherCopy: return "copy";
    case Transfer::kMemset: return "memset";
  }
  return "copy";
}

bool IsTransferName(const std::string& name) {
  for (Transfer t : {Transfer::kHostToDevice, Transfer::kDeviceToHost, Transfer::kDeviceToDevice,
                     Transfer::kPeerToPeer, Transfer::kHostToHost, Transfer::kOtherCopy,
                     Transfer::kMemset}) {
    if (name == TransferName(t)) return true;
  }
  return false;
}

v1::CallProfile SummarizeActivity(std::vector<RawActivity> records, int64_t lost) {
  v1::CallProfile p;
  std::sort(records.begin(), records.end(), [](const RawActivity& a, const RawActivity& b) {
    return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns < b.end_ns;
  });
  if (records.empty()) {
    p.set_dropped(static_cast<int32_t>(lost));
    return p;
  }
  const uint64_t first = records.front().start_ns;
  uint64_t last = first, busy = 0, covered_to = first;
  int64_t bytes = 0;
  for (const RawActivity& r : records) {
    const uint64_t end = std::max(r.start_ns, r.end_ns);
    last = std::max(last, end);
    // The union of the intervals, sorted by start: only what lies past the covered prefix counts.
    if (end > covered_to) {
      busy += end - std::max(covered_to, r.start_ns);
      covered_to = end;
    }
    bytes += r.bytes;
  }
  p.set_span_us(static_cast<double>(last - first) / 1e3);
  p.set_busy_us(static_cast<double>(busy) / 1e3);
  p.set_copy_bytes(bytes);
  const size_t kept = std::min(records.size(), static_cast<size_t>(kMaxProfileRecords));
  p.set_dropped(static_cast<int32_t>(lost + static_cast<int64_t>(records.size() - kept)));
  for (size_t i = 0; i < kept; ++i) {
    const RawActivity& r = records[i];
    v1::ProfileRecord* out = p.add_records();
    out->set_kind(r.kind);
    out->set_name(r.name.substr(0, 256));
    out->set_start_us(static_cast<double>(r.start_ns - first) / 1e3);
    out->set_duration_us(static_cast<double>(std::max(r.start_ns, r.end_ns) - r.start_ns) / 1e3);
    if (r.kind == v1::ProfileRecord::KERNEL) {
      for (int d = 0; d < 3; ++d) {
        out->add_grid(r.grid[d]);
        out->add_block(r.block[d]);
      }
      out->set_registers_per_thread(r.registers_per_thread);
      out->set_shared_memory_bytes(r.shared_memory_bytes);
    }
    out->set_bytes(r.bytes);
    out->set_stream(r.stream);
  }
  return p;
}

namespace {

std::string Shape(const google::protobuf::RepeatedField<int32_t>& d) {
  return d.size() == 3 ? absl::StrFormat("%dx%dx%d", d[0], d[1], d[2]) : "?";
}

// "3 kernels, 1 copy in 5.31 us (busy 5.10 us)", or the note.
std::string CallSummary(const v1::CallProfile& c) {
  if (c.records_size() == 0) return c.note().empty() ? "no activity recorded" : c.note();
  int kernels = 0, copies = 0;
  for (const auto& rec : c.records()) (rec.kind() == v1::ProfileRecord::KERNEL ? kernels : copies)++;
  std::string s = absl::StrFormat("%d kernel%s, %d cop%s or memset%s in %.2f us (busy %.2f us)",
                                  kernels, kernels == 1 ? "" : "s", copies,
                                  copies == 1 ? "y" : "ies", copies == 1 ? "" : "s", c.span_us(),
                                  c.busy_us());
  if (c.dropped() > 0) absl::StrAppend(&s, "; ", c.dropped(), " more not kept");
  return s;
}

void AppendRecords(std::string& s, const v1::CallProfile& c, int records) {
  int shown = 0;
  for (const auto& rec : c.records()) {
    if (shown++ == records) {
      absl::StrAppendFormat(&s, "      ... %d more\n", c.records_size() - records);
      break;
    }
    std::string name = rec.name().size() > 72 ? rec.name().substr(0, 69) + "..." : rec.name();
    absl::StrAppendFormat(&s, "    %9.2f %9.2f us  %s", rec.start_us(), rec.duration_us(), name);
    if (rec.kind() == v1::ProfileRecord::KERNEL) {
      absl::StrAppendFormat(&s, "  grid %s block %s, %d regs, %d B shared", Shape(rec.grid()),
                            Shape(rec.block()), rec.registers_per_thread(),
                            rec.shared_memory_bytes());
    } else {
      absl::StrAppendFormat(&s, "  %d B", rec.bytes());
    }
    s += "\n";
  }
}

}  // namespace

std::string ProfileText(const v1::EvalResult& r, int records) {
  if (r.profiles_size() == 0) return "";
  const v1::RankProfile& first = r.profiles(0);
  if (first.candidate().records_size() == 0 && first.reference().records_size() == 0) {
    const std::string& why =
        first.candidate().note().empty() ? first.reference().note() : first.candidate().note();
    return absl::StrCat("profile: none (", why.empty() ? "no activity recorded" : why, ")\n");
  }
  std::string s =
      "profile: one call of each side after the timed window, untimed (the candidate's is its "
      "own process's account)\n";
  for (const auto& [side, call] : {std::pair<const char*, const v1::CallProfile*>{
                                       "candidate", &first.candidate()},
                                   {"reference", &first.reference()}}) {
    absl::StrAppendFormat(&s, "  %s, rank %d: %s\n", side, first.rank(), CallSummary(*call));
    if (call->records_size() > 0) {
      s += "        start     time\n";
      AppendRecords(s, *call, records);
    }
  }
  for (int i = 1; i < r.profiles_size(); ++i) {
    const v1::RankProfile& p = r.profiles(i);
    absl::StrAppendFormat(&s, "  rank %d: candidate %.2f us, reference %.2f us\n", p.rank(),
                          p.candidate().span_us(), p.reference().span_us());
  }
  const double span = first.candidate().span_us();
  if (span > 0 && r.has_roofline() && (r.roofline().hbm_bytes() > 0 || r.roofline().nvlink_bytes() > 0)) {
    absl::StrAppendFormat(&s,
                          "  the roofline's bytes over the candidate's span: %.1f GB/s through "
                          "HBM, %.1f GB/s over NVLink per rank (floor %.2f us)\n",
                          r.roofline().hbm_bytes() / span / 1e3,
                          r.roofline().nvlink_bytes() / span / 1e3, r.roofline().floor_us());
  }
  return s;
}

#ifndef PKB_WITH_CUDA
absl::StatusOr<v1::CallProfile> ProfileCall(const std::function<absl::Status()>& body,
                                            const std::function<absl::Status()>& sync) {
  PKB_RETURN_IF_ERROR(body());
  PKB_RETURN_IF_ERROR(sync());
  v1::CallProfile p;
  p.set_note("no GPU profile: this build has no CUDA");
  return p;
}
#endif

}  // namespace pkb
