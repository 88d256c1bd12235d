// Problem 70 — TorchRec's KJTAllToAll: a KeyedJaggedTensor's features are owned table-wise by
// the ranks; each rank sends every owner its features' lengths and values, and the owner
// regroups what it receives feature-major. The number of values received depends on the data.
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

enum : size_t { kLengths, kValues };  // tensor inputs, in call order
enum : int { kOutLengths, kOutValues, kStride, kStridePerRank, kValuesCount };  // outputs

constexpr int64_t kMinLength = 5, kMaxLength = 20;  // lengths = randint[5, 21)

// ks[d] = 1 + d mod 3 features are owned by rank d, in rank order.
std::vector<int64_t> KeySplits(int64_t world) {
  std::vector<int64_t> ks;
  for (int64_t d = 0; d < world; ++d) ks.push_back(1 + d % 3);
  return ks;
}

int64_t Sum(const std::vector<int64_t>& v) {
  int64_t s = 0;
  for (int64_t x : v) s += x;
  return s;
}

int64_t BatchSize(const RunConfig& cfg) {
  return std::max<int64_t>(512, std::min<int64_t>(cfg.m / cfg.world, 1024));
}

std::vector<int64_t> ToHost(const at::Tensor& t) {
  at::Tensor c = t.to(at::kCPU).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

at::Tensor LongTensor(const std::vector<int64_t>& v, at::Device device) {
  return at::tensor(v, at::TensorOptions().dtype(at::kLong)).to(device);
}

class TorchrecKjtAll2All : public Problem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        70,
        "70_torchrec_kjt_all2all",
        1,
        "TorchRec KJTAllToAll (KeyedJaggedTensor input distribution for table-wise sharded "
        "embeddings)",
        "other",
        R"md(Distribute a KeyedJaggedTensor to the ranks that own its features, over WORLD. Any W.

- Sizes: rank d owns ks[d] = 1 + (d mod 3) features, contiguously in rank order (the
  first ks[0] features are rank 0's, ...); F = sum ks (15 at W = 8); batch
  B = max(512, min(M/W, 1024)).
- Inputs per rank r, drawn on the device in this
  order: `lengths` (F*B,) int64 = randint[5, 21) drawn as (F, B) and flattened
  feature-major (lengths[f*B + b]); `values` (sum(lengths),) int64 = randint[0, 10^6):
  the values of (f, b) follow those of every earlier (f, b) in that order. Its length
  depends on the data. Scalars: `key_splits[0..W-1]` = ks, `batch_size` = B (weights,
  stride_per_key and stagger are PKB's defaults: none, none, 1).
- Computation: (1) each rank sends rank d the triple (ks[d]*B, sum of the lengths of
  rank d's features, B) (all_to_all_single of 3 int64 per peer). (2) all_to_all_single
  of the lengths (rank d's features' ks[d]*B lengths to rank d) and of the values (their
  value runs), with those splits. (3) Rank r receives the layout [source s][local
  feature f][b]; it reorders whole segments (B lengths with their value runs) to
  [f][s][b].
- Outputs on rank r, in this fixed order (PKB returns a dict with these keys):
  `lengths` (ks[r]*W*B,) int64: element (f*W + s)*B + b = source s's length of (its
  feature offset_r + f, b); `values` (20*ks[r]*W*B,) int64 whose first V_r entries are the
  value runs in the same [f][s][b] order; `stride` 0-d int64 = W*B; `stride_per_rank`
  (W,) int64 = [B]*W; `values_count` 0-d int64 = V_r = the sum of rank r's received
  lengths. V_r depends on the data: the candidate writes it to `values_count`;
  20*ks[r]*W*B is a capacity (every length is at most 20). The count is compared exactly,
  then only the first V_r values; entries past V_r are ignored.
- Integers moved, never computed: all outputs exact. Leaving the [s][f][b] order of the
  exchange fails on every rank that owns two or more features (rank 0 owns one, so the
  reorder is the identity there).
- Host syncs in PKB's reference: the per-feature sums and the exchanged splits are read
  back; the reorder cuts value runs on the host.
- Traffic: 8 (F - ks[r]) B (1 + 12.5) bytes sent by rank r (the mean length is 12.5),
  8 ks[r] (W-1) B (1 + 12.5) received. FLOPs: 0.)md"};
    return i;
  }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    return RequirePositiveShape(cfg);
  }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    const std::vector<int64_t> ks = KeySplits(cfg.world);
    const int64_t f = Sum(ks), b = BatchSize(cfg);
    auto longs = at::TensorOptions().dtype(at::kLong).device(cfg.device);
    Inputs in;
    at::Tensor lengths = at::randint(kMinLength, kMaxLength + 1, {f, b}, longs).reshape({-1});
    // The values' length is the lengths' sum (a host sync, as in PKB): it cannot be drawn on the
    // meta device, so the catalog lists this problem's outputs only.
    in.Add("lengths", lengths);
    in.Add("values", at::randint(0, 1000000, {lengths.sum().item<int64_t>()}, longs));
    AddIntList(in, "key_splits", ks);
    in.scalars.push_back(ScalarArg::Int("batch_size", b));
    return in;
  }

  // Capacity of `values`: each of the W sources sends ks[r]*B lengths, each at most 20.
  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    const int64_t w = cfg.world, b = BatchSize(cfg), local = KeySplits(w)[rank];
    return {{"lengths", {local * w * b}, at::kLong},
            {"values", {kMaxLength * local * w * b}, at::kLong, kValuesCount},
            {"stride", {}, at::kLong},
            {"stride_per_rank", {w}, at::kLong},
            {"values_count", {}, at::kLong}};
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    const int64_t w = comm.size(), r = comm.rank();
    PKB_ASSIGN_OR_RETURN(std::vector<int64_t> ks, IntList(in, "key_splits"));
    const int64_t b = BatchSize(cfg);
    const at::Tensor& lengths = in[kLengths];
    const at::Tensor& values = in[kValues];
    const at::Device dev = lengths.device();
    if (static_cast<int64_t>(ks.size()) != w || lengths.numel() != Sum(ks) * b) {
      return absl::InvalidArgumentError(
          absl::StrCat("key_splits has ", ks.size(), " entries and lengths ", lengths.numel(),
                       " elements; expected W = ", w, " entries and F*B = ", Sum(ks) * b));
    }
    // Splits per destination: ks[d]*B lengths and the sum of rank d's features' lengths.
    std::vector<int64_t> per_key = ToHost(lengths.view({-1, b}).sum(1));
    std::vector<int64_t> length_splits, value_splits;
    for (int64_t d = 0, f = 0; d < w; ++d) {
      length_splits.push_back(ks[d] * b);
      int64_t v = 0;
      for (int64_t k = 0; k < ks[d]; ++k) v += per_key[f++];
      value_splits.push_back(v);
    }
    at::Tensor meta_in = at::stack({LongTensor(length_splits, dev), LongTensor(value_splits, dev),
                                    at::full({w}, b, lengths.options())},
                                   1)
                             .reshape({-1});
    at::Tensor meta_out = at::empty_like(meta_in);
    PKB_RETURN_IF_ERROR(comm.AllToAllSingle(meta_out, meta_in, {}, {}));
    std::vector<int64_t> meta = ToHost(meta_out);  // (W, 3): per source
    std::vector<int64_t> recv_length_splits, recv_value_splits, stride_per_rank;
    for (int64_t s = 0; s < w; ++s) {
      recv_length_splits.push_back(meta[3 * s]);
      recv_value_splits.push_back(meta[3 * s + 1]);
      stride_per_rank.push_back(meta[3 * s + 2]);
    }
    at::Tensor recv_lengths = at::empty({Sum(recv_length_splits)}, lengths.options());
    at::Tensor recv_values = at::empty({Sum(recv_value_splits)}, values.options());
    PKB_RETURN_IF_ERROR(
        comm.AllToAllSingle(recv_lengths, lengths.contiguous(), recv_length_splits, length_splits));
    PKB_RETURN_IF_ERROR(
        comm.AllToAllSingle(recv_values, values.contiguous(), recv_value_splits, value_splits));

    // Every source sent B lengths per feature, so segments are rows of (W*ks[r], B), indexed
    // s*ks[r] + f; the reorder takes them f-major (PKB's recat with stagger 1).
    const int64_t local = ks[r], stride = stride_per_rank[0];
    at::Tensor rows = recv_lengths.view({-1, stride});
    std::vector<int64_t> recat;
    for (int64_t f = 0; f < local; ++f) {
      for (int64_t s = 0; s < w; ++s) recat.push_back(s * local + f);
    }
    std::vector<int64_t> seg = ToHost(rows.sum(1));
    std::vector<int64_t> start(seg.size() + 1, 0);
    for (size_t i = 0; i < seg.size(); ++i) start[i + 1] = start[i] + seg[i];
    std::vector<at::Tensor> chunks;
    for (int64_t k : recat) chunks.push_back(recv_values.narrow(0, start[k], seg[k]));
    at::Tensor out_lengths = rows.index_select(0, LongTensor(recat, dev)).reshape({-1});
    at::Tensor out_values = at::cat(chunks);
    return std::vector<at::Tensor>{
        out_lengths, out_values, at::scalar_tensor(Sum(stride_per_rank), lengths.options()),
        LongTensor(stride_per_rank, dev), at::scalar_tensor(out_values.size(0), lengths.options())};
  }

  // Rank r's output, feature by feature and source by source, cut from each source's inputs.
  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    const int64_t w = static_cast<int64_t>(all.size()), b = BatchSize(cfg);
    const std::vector<int64_t> ks = KeySplits(w);
    std::vector<std::vector<int64_t>> value_start;  // per source, per feature
    for (const Inputs& in : all) {
      std::vector<int64_t> per_key = ToHost(in[kLengths].view({-1, b}).sum(1)), start{0};
      for (int64_t v : per_key) start.push_back(start.back() + v);
      value_start.push_back(start);
    }
    std::vector<std::vector<at::Tensor>> res;
    for (int64_t r = 0, first = 0; r < w; first += ks[r], ++r) {
      std::vector<at::Tensor> lengths, values;
      for (int64_t f = first; f < first + ks[r]; ++f) {
        for (int64_t s = 0; s < w; ++s) {
          lengths.push_back(all[s][kLengths].narrow(0, f * b, b));
          values.push_back(all[s][kValues].narrow(0, value_start[s][f],
                                                  value_start[s][f + 1] - value_start[s][f]));
        }
      }
      at::Tensor v = at::cat(values);
      auto longs = at::TensorOptions().dtype(at::kLong);
      res.push_back({at::cat(lengths), v, at::scalar_tensor(w * b, longs), at::full({w}, b, longs),
                     at::scalar_tensor(v.size(0), longs)});
    }
    return res;
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    static const char* const kWhy[] = {
        "Lengths are moved, never computed, into the one [feature][source][batch] order: exact.",
        "Value runs are moved with their lengths' segments: exact.", "W*B, an integer: exact.",
        "The batch size of every source: exact.",
        "The number of values received: an integer, exact."};
    return {0, 0, true, kWhy[index]};
  }

  // The busiest rank: rank 0 sends the most (it owns one feature of F), a rank owning three
  // features receives the most; a duplex link is bound by the larger of the two.
  Roofline GetRoofline(const RunConfig& cfg) const override {
    const std::vector<int64_t> ks = KeySplits(cfg.world);
    const double f = static_cast<double>(Sum(ks)), b = static_cast<double>(BatchSize(cfg));
    const double mean_length = (kMinLength + kMaxLength) / 2.0;
    const double row = 8 * (1 + mean_length);  // one length and its values
    const double local_max = static_cast<double>(*std::max_element(ks.begin(), ks.end()));
    const double sent = (f - 1) * b * row, received = local_max * (cfg.world - 1) * b * row;
    Roofline r;
    r.nvlink_bytes = std::max(sent, received);
    r.hbm_bytes = (f + local_max * cfg.world) * b * row;  // read the KJT, write the received one
    r.flops = 0;
    return r;
  }
};
PKB_REGISTER_PROBLEM(TorchrecKjtAll2All);

}  // namespace
}  // namespace pkb
