#include "problems/ep/moe_pipeline.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "problems/harness/check.h"

namespace pkb {
std::vector<int64_t> ToHostLongs(const at::Tensor& t) {
  at::Tensor c = t.to(at::kCPU, at::kLong).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

at::Tensor SortChunks(const at::Tensor& x, const std::vector<int64_t>& sizes,
                      const std::vector<int64_t>& order) {
  std::vector<at::Tensor> chunks = at::split_with_sizes(x, sizes, 0);
  std::vector<at::Tensor> sorted;
  sorted.reserve(order.size());
  for (int64_t i : order) sorted.push_back(chunks[i]);
  return at::cat(sorted, 0);
}

std::vector<int64_t> ToExpertMajor(int64_t world, int64_t local) {
  std::vector<int64_t> order;
  for (int64_t l = 0; l < local; ++l) {
    for (int64_t s = 0; s < world; ++s) order.push_back(s * local + l);
  }
  return order;
}

std::vector<int64_t> ToSourceMajor(int64_t world, int64_t local) {
  std::vector<int64_t> order;
  for (int64_t s = 0; s < world; ++s) {
    for (int64_t l = 0; l < local; ++l) order.push_back(l * world + s);
  }
  return order;
}

at::Tensor PermutedTokenIndices(const at::Tensor& routing_map) {
  const int64_t experts = routing_map.size(0), tokens = routing_map.size(1);
  at::Tensor token_idx = at::arange(tokens, routing_map.options().dtype(at::kLong))
                             .unsqueeze(0)
                             .expand({experts, tokens});
  return token_idx.masked_select(routing_map.to(at::kBool));
}

at::Tensor DrawDistinctExperts(const RunConfig& cfg, int64_t tokens, int64_t experts, int64_t k) {
  auto longs = at::TensorOptions().dtype(at::kLong).device(cfg.device);
  if (cfg.device.is_meta()) return at::empty({tokens, k}, longs);
  std::vector<at::Tensor> picks;
  picks.reserve(tokens);
  for (int64_t j = 0; j < tokens; ++j)
    picks.push_back(at::randperm(experts, longs).narrow(0, 0, k));
  return at::stack(picks, 0);
}

at::Tensor UnpermuteCombine(const at::Tensor& rows, const at::Tensor& weights,
                            const at::Tensor& selected, const at::Tensor& routing_map,
                            const at::Tensor& sorted_idx) {
  const int64_t tokens = routing_map.size(1), hidden = rows.size(1);
  at::Tensor weights_idx = at::zeros({tokens, routing_map.size(0)}, weights.options())
                               .scatter_add_(1, selected, weights);
  at::Tensor row_weight = weights_idx.t().contiguous().masked_select(routing_map.to(at::kBool));
  at::Tensor weighted = rows * row_weight.unsqueeze(-1);
  at::Tensor out = at::zeros({tokens, hidden}, weighted.options());
  out.scatter_add_(0, sorted_idx.unsqueeze(1).expand({-1, hidden}), weighted);
  return out;
}

LinearWeights DrawLinear(const RunConfig& cfg, int64_t in_features, int64_t out_features) {
  // torch.nn.init.kaiming_uniform_(w, a=sqrt(5)): gain = sqrt(2 / (1 + a^2)),
  // bound = sqrt(3) * gain / sqrt(fan_in), computed in double as Python does.
  const double a = std::sqrt(5.0);
  const double gain = std::sqrt(2.0 / (1.0 + a * a));
  const double w_bound = std::sqrt(3.0) * (gain / std::sqrt(static_cast<double>(in_features)));
  const double b_bound = in_features > 0 ? 1.0 / std::sqrt(static_cast<double>(in_features)) : 0;
  auto cpu = at::TensorOptions().dtype(at::kFloat).device(at::kCPU);
  at::Tensor w = at::empty({out_features, in_features}, cpu).uniform_(-w_bound, w_bound);
  at::Tensor b = at::empty({out_features}, cpu).uniform_(-b_bound, b_bound);
  return {w.to(cfg.dtype).to(cfg.device), b.to(cfg.dtype).to(cfg.device)};
}

at::Tensor SwiGluExpert(const at::Tensor& x, const LinearWeights& gate, const LinearWeights& up,
                        const LinearWeights& down) {
  at::Tensor g = at::silu(ApplyLinear(x, gate.weight, gate.bias));
  at::Tensor u = ApplyLinear(x, up.weight, up.bias);
  return ApplyLinear(g * u, down.weight, down.bias);
}

at::Tensor RouterProbs(const at::Tensor& x2d, const at::Tensor& gate_weight,
                       const at::Tensor& gate_bias) {
  return at::softmax(at::linear(x2d, gate_weight, gate_bias), -1);
}

Routing Route(const at::Tensor& x2d, const at::Tensor& gate_weight, const at::Tensor& gate_bias,
              int64_t top_k) {
  auto [w, sel] = at::topk(RouterProbs(x2d, gate_weight, gate_bias), top_k, -1);
  return {w, sel};
}

absl::StatusOr<at::Tensor> MoeEpForward(Comm& comm, const at::Tensor& x,
                                        const at::Tensor& gate_weight, const at::Tensor& gate_bias,
                                        int64_t num_experts, int64_t top_k,
                                        const ExpertFn& expert) {
  const int64_t world = comm.size();
  const int64_t rank = comm.rank();
  if (num_experts % world != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("moe: num_experts ", num_experts, " not divisible by EP size ", world));
  }
  const int64_t local = num_experts / world;
  const int64_t hidden = x.size(-1);
  at::Tensor x2 = x.reshape({-1, hidden});

  // 1. Routing.
  Routing route = Route(x2, gate_weight, gate_bias, top_k);
  // expert_mask (E, k, T); routing_map (E, T).
  at::Tensor routing_map = at::one_hot(route.selected, num_experts).sum(1).t().contiguous();
  at::Tensor counts = routing_map.sum(1).to(at::kLong).contiguous();  // (E)

  // 2-3. Splits and the all-gather of counts.
  std::vector<int64_t> c = ToHostLongs(counts);
  std::vector<int64_t> input_splits(world, 0);
  for (int64_t e = 0; e < num_experts; ++e) input_splits[e / local] += c[e];
  at::Tensor gathered = at::empty({world * num_experts}, counts.options());
  PKB_RETURN_IF_ERROR(comm.AllGatherInto(gathered, counts));
  std::vector<int64_t> g = ToHostLongs(gathered);  // g[s * E + e]
  std::vector<int64_t> output_splits(world, 0);
  std::vector<int64_t> by_source(world * local), by_expert(world * local);
  for (int64_t s = 0; s < world; ++s) {
    for (int64_t l = 0; l < local; ++l) {
      int64_t n = g[s * num_experts + rank * local + l];
      output_splits[s] += n;
      by_source[s * local + l] = n;  // chunk sizes as received: (source, local expert)
      by_expert[l * world + s] = n;  // chunk sizes after regrouping: (local expert, source)
    }
  }

  // 4. Permute: token indices expert-major, ascending within each expert.
  at::Tensor sorted_idx = PermutedTokenIndices(routing_map);
  at::Tensor permuted = x2.index_select(0, sorted_idx).contiguous();
  if (permuted.size(0) != std::accumulate(input_splits.begin(), input_splits.end(), int64_t{0})) {
    return absl::InternalError("moe: input_splits do not sum to the permuted token count");
  }

  // 5. Dispatch.
  at::Tensor received = permuted;
  if (world > 1) {
    int64_t rows = std::accumulate(output_splits.begin(), output_splits.end(), int64_t{0});
    received = at::empty({rows, hidden}, permuted.options());
    PKB_RETURN_IF_ERROR(comm.AllToAllSingle(received, permuted, output_splits, input_splits));
  }

  // 6. Regroup to (local expert, source) order: chunk s*L + l goes to position l*W + s.
  at::Tensor grouped = SortChunks(received, by_source, ToExpertMajor(world, local));

  // 7. Experts.
  at::Tensor y = expert(grouped);

  // 8. Undo the regrouping and combine.
  at::Tensor back = SortChunks(y, by_expert, ToSourceMajor(world, local)).contiguous();
  at::Tensor returned = back;
  if (world > 1) {
    returned = at::empty({permuted.size(0), hidden}, back.options());
    PKB_RETURN_IF_ERROR(comm.AllToAllSingle(returned, back, input_splits, output_splits));
  }

  // 9. Weight by the routing probability and scatter-add per token.
  return UnpermuteCombine(returned, route.weights, route.selected, routing_map, sorted_idx);
}

at::Tensor MoeEpOracle(const at::Tensor& x, const at::Tensor& gate_weight,
                       const at::Tensor& gate_bias, int64_t num_experts, int64_t top_k,
                       const std::vector<ExpertFn>& experts) {
  at::Tensor x2 = x.reshape({-1, x.size(-1)});
  Routing route = Route(x2, gate_weight, gate_bias, top_k);
  return MoeEpCombine(x2, route.weights, route.selected, num_experts, experts);
}

at::Tensor MoeEpCombine(const at::Tensor& x2d, const at::Tensor& weights,
                        const at::Tensor& selected, int64_t num_experts,
                        const std::vector<ExpertFn>& experts) {
  const int64_t world = static_cast<int64_t>(experts.size());
  const int64_t local = num_experts / world;
  const int64_t tokens = x2d.size(0), hidden = x2d.size(1), top_k = selected.size(1);
  // Ascending expert order per token: the order in which the scatter-add meets the pairs.
  auto [sel, order] = at::sort(selected, 1);
  at::Tensor w = weights.gather(1, order);
  at::Tensor owner = at::floor_divide(sel, local);  // (T, k)
  // Row d T + t holds owner d's expert applied to token t, for the pairs that need it; the
  // buffer takes the experts' output dtype.
  at::Tensor all;
  for (int64_t d = 0; d < world; ++d) {
    at::Tensor needed = owner.eq(d).any(1).nonzero().reshape({-1});
    if (needed.numel() == 0) continue;
    at::Tensor y = experts[d](x2d.index_select(0, needed));
    if (!all.defined()) all = at::zeros({world * tokens, hidden}, y.options());
    all.index_copy_(0, needed + d * tokens, y);
  }
  if (!all.defined()) all = at::zeros({world * tokens, hidden}, x2d.options());
  at::Tensor token = at::arange(tokens, sel.options());
  at::Tensor out = at::zeros({tokens, hidden}, all.options());
  for (int64_t j = 0; j < top_k; ++j) {
    at::Tensor y = all.index_select(0, owner.select(1, j) * tokens + token);  // (T, N)
    out = out + y * w.select(1, j).unsqueeze(-1);
  }
  return out;
}

TieChoices RoutingTieChoices(const at::Tensor& probs, const Routing& route, int64_t local) {
  TieChoices out;
  const at::Tensor p = probs.to(at::kCPU, at::kDouble).contiguous();
  const at::Tensor sel = route.selected.to(at::kCPU, at::kLong).contiguous();
  const int64_t tokens = p.size(0), experts = p.size(1), k = sel.size(1);
  auto owners = [local](std::vector<int64_t> es) {
    for (int64_t& e : es) e /= local;
    std::sort(es.begin(), es.end());
    return es;
  };
  for (int64_t t = 0; t < tokens && k > 0; ++t) {
    const double* row = p.const_data_ptr<double>() + t * experts;
    const int64_t* chosen = sel.const_data_ptr<int64_t>() + t * k;
    double kth = row[chosen[0]];
    for (int64_t j = 1; j < k; ++j) kth = std::min(kth, row[chosen[j]]);
    std::vector<int64_t> above, tied;
    for (int64_t e = 0; e < experts; ++e) {
      if (row[e] > kth) above.push_back(e);
      if (row[e] == kth) tied.push_back(e);
    }
    const size_t need = static_cast<size_t>(k) - std::min<size_t>(above.size(), k);
    if (tied.size() <= need) continue;  // every tied expert is chosen: no choice
    std::set<std::vector<int64_t>> seen{owners(std::vector<int64_t>(chosen, chosen + k))};
    // Every `need`-subset of `tied`, lexicographically: pick[i] indexes tied.
    std::vector<size_t> pick(need);
    std::iota(pick.begin(), pick.end(), size_t{0});
    while (true) {
      std::vector<int64_t> experts_chosen = above;
      for (size_t i : pick) experts_chosen.push_back(tied[i]);
      std::sort(experts_chosen.begin(), experts_chosen.end());
      if (seen.insert(owners(experts_chosen)).second) {
        out.token.push_back(t);
        out.selected.push_back(std::move(experts_chosen));
      }
      size_t i = need;
      while (i > 0 && pick[i - 1] == tied.size() - need + i - 1) --i;
      if (i == 0) break;
      ++pick[i - 1];
      for (size_t j = i; j < need; ++j) pick[j] = pick[j - 1] + 1;
    }
  }
  return out;
}

namespace {

at::Tensor Longs(const std::vector<int64_t>& v, at::Device device) {
  return at::tensor(v, at::TensorOptions().dtype(at::kLong)).reshape({-1}).to(device);
}

// The distinct tokens of `c`, ascending.
std::vector<int64_t> TiedTokens(const TieChoices& c) {
  std::vector<int64_t> tokens = c.token;
  tokens.erase(std::unique(tokens.begin(), tokens.end()), tokens.end());
  return tokens;
}

// Rows x2d[tokens], zero-padded to `rows` rows.
at::Tensor PaddedRows(const at::Tensor& x2d, const std::vector<int64_t>& tokens, int64_t rows) {
  at::Tensor out = at::zeros({rows, x2d.size(1)}, x2d.options());
  if (!tokens.empty()) {
    out.narrow(0, 0, static_cast<int64_t>(tokens.size()))
        .copy_(x2d.index_select(0, Longs(tokens, x2d.device())));
  }
  return out;
}

// Group member `me`'s alternative rows (A, N), the closed form of each alternative routing.
// `ys` (P P maxn, N): row (d P + s) maxn + i is member d's expert applied to member s's i-th
// tied token; `tied` lists me's tied tokens.
at::Tensor AlternativeRows(const TieChoices& c, const std::vector<int64_t>& tied,
                           const at::Tensor& probs, const at::Tensor& ys, int64_t me,
                           int64_t members, int64_t maxn, int64_t local) {
  const int64_t a = static_cast<int64_t>(c.token.size());
  if (a == 0) return at::empty({0, ys.size(1)}, ys.options());
  const int64_t k = static_cast<int64_t>(c.selected[0].size());
  std::vector<int64_t> rows, experts;
  for (int64_t i = 0; i < a; ++i) {
    const int64_t pos = std::lower_bound(tied.begin(), tied.end(), c.token[i]) - tied.begin();
    for (int64_t e : c.selected[i]) {
      rows.push_back(((e / local) * members + me) * maxn + pos);
      experts.push_back(e);
    }
  }
  at::Tensor row_idx = Longs(rows, ys.device()).view({a, k});
  at::Tensor w = probs.index_select(0, Longs(c.token, probs.device()))
                     .gather(1, Longs(experts, probs.device()).view({a, k}));
  // MoeEpCombine's arithmetic: products in the experts' dtype, summed in ascending expert order.
  at::Tensor out = at::zeros({a, ys.size(1)}, ys.options());
  for (int64_t j = 0; j < k; ++j) {
    out = out + ys.index_select(0, row_idx.select(1, j)) * w.select(1, j).unsqueeze(-1);
  }
  return out;
}

std::vector<at::Tensor> NoTieKeys(const RunConfig& cfg) {
  return {at::empty({0}, at::TensorOptions().dtype(at::kLong).device(cfg.device)),
          at::empty({0, cfg.n}, at::TensorOptions().dtype(cfg.dtype).device(cfg.device))};
}

}  // namespace

std::vector<GroupLayout> MoeEpProblem::Groups(const RunConfig& cfg) const {
  const int ep = EpSize(cfg.world);
  if (ep >= cfg.world) return {};
  GroupLayout layout{"ep", {}};
  for (int g = 0; g < cfg.world / ep; ++g) {
    layout.partition.emplace_back();
    for (int i = 0; i < ep; ++i) layout.partition.back().push_back(g * ep + i);
  }
  return {layout};
}

Inputs MoeEpProblem::MakeInputs(const RunConfig& cfg, int rank, int set) const {
  const int64_t e = NumExperts(cfg.world);
  auto opts = at::TensorOptions().dtype(cfg.dtype).device(cfg.device);
  Inputs in;
  in.Add("hidden_states", at::randn({cfg.m, cfg.n}, opts));
  in.Add("gate_weight", at::randn({e, cfg.n}, opts));
  in.Add("gate_bias", at::randn({e}, opts));
  LinearWeights gate = DrawLinear(cfg, cfg.n, kMoeInter);
  LinearWeights up = DrawLinear(cfg, cfg.n, kMoeInter);
  LinearWeights down = DrawLinear(cfg, kMoeInter, cfg.n);
  in.Add("gate_proj.weight", gate.weight);
  in.Add("gate_proj.bias", gate.bias);
  in.Add("up_proj.weight", up.weight);
  in.Add("up_proj.bias", up.bias);
  in.Add("down_proj.weight", down.weight);
  in.Add("down_proj.bias", down.bias);
  AddExpertExtras(cfg, set, in);
  in.scalars.push_back(ScalarArg::Int("num_experts", e));
  in.scalars.push_back(ScalarArg::Int("top_k", TopK(cfg.world)));
  return in;
}

std::vector<OutputDecl> MoeEpProblem::Outputs(const RunConfig& cfg, int rank) const {
  return {{"out", {cfg.m, cfg.n}, cfg.dtype}};
}

ExpertFn MoeEpProblem::ExpertOf(const Inputs& in) const {
  LinearWeights gate{in[kMoeGpW], in[kMoeGpB]}, up{in[kMoeUpW], in[kMoeUpB]},
      down{in[kMoeDnW], in[kMoeDnB]};
  return [gate, up, down](const at::Tensor& x) { return SwiGluExpert(x, gate, up, down); };
}

absl::StatusOr<Comm*> MoeEpProblem::EpComm(Comm& comm) const {
  if (EpSize(comm.size()) >= comm.size()) return &comm;
  Comm* ep = comm.Group("ep");
  if (ep == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(info().slug, ": this rank has no communicator for its EP group \"ep\""));
  }
  return ep;
}

absl::StatusOr<std::vector<at::Tensor>> MoeEpProblem::Reference(Comm& comm, const Inputs& in,
                                                                const RunConfig& cfg) const {
  PKB_ASSIGN_OR_RETURN(Comm * ep, EpComm(comm));
  PKB_ASSIGN_OR_RETURN(at::Tensor out,
                       MoeEpForward(*ep, in[kMoeX], in[kMoeGateW], in[kMoeGateB],
                                    NumExperts(cfg.world), TopK(cfg.world), ExpertOf(in)));
  return std::vector<at::Tensor>{out};
}

absl::StatusOr<std::vector<std::vector<at::Tensor>>> MoeEpProblem::Oracle(
    const std::vector<Inputs>& all, const RunConfig& cfg) const {
  const int world = static_cast<int>(all.size()), ep = EpSize(world);
  const int64_t e = NumExperts(world), k = TopK(world);
  std::vector<std::vector<at::Tensor>> result;
  for (int g = 0; g < world / ep; ++g) {
    std::vector<ExpertFn> experts;  // group rank i hosts experts [i L, (i+1) L)
    for (int i = 0; i < ep; ++i) experts.push_back(ExpertOf(all[g * ep + i]));
    for (int i = 0; i < ep; ++i) {
      const Inputs& in = all[g * ep + i];
      result.push_back({MoeEpOracle(in[kMoeX], in[kMoeGateW], in[kMoeGateB], e, k, experts)});
    }
  }
  return result;
}

absl::StatusOr<std::vector<at::Tensor>> MoeEpProblem::TieKeys(
    Comm& comm, const Inputs& in, const RunConfig& cfg,
    const std::vector<at::Tensor>& expected) const {
  PKB_ASSIGN_OR_RETURN(Comm * ep, EpComm(comm));
  const int64_t members = ep->size(), me = ep->rank();
  const int64_t local = NumExperts(cfg.world) / members;
  at::Tensor x2 = in[kMoeX].reshape({-1, in[kMoeX].size(-1)});
  at::Tensor probs = RouterProbs(x2, in[kMoeGateW], in[kMoeGateB]);
  auto [w, sel] = at::topk(probs, TopK(cfg.world), -1);
  const TieChoices choices = RoutingTieChoices(probs, {w, sel}, local);
  const std::vector<int64_t> tied = TiedTokens(choices);
  at::Tensor count = Longs({static_cast<int64_t>(tied.size())}, x2.device());
  at::Tensor counts = at::empty({members}, count.options());
  PKB_RETURN_IF_ERROR(ep->AllGatherInto(counts, count));
  const int64_t maxn = counts.max().item<int64_t>();
  if (maxn == 0) return NoTieKeys(cfg);
  at::Tensor batch = at::empty({members * maxn, x2.size(1)}, x2.options());
  PKB_RETURN_IF_ERROR(ep->AllGatherInto(batch, PaddedRows(x2, tied, maxn)));
  at::Tensor y = ExpertOf(in)(batch).contiguous();
  at::Tensor ys = at::empty({members * y.size(0), y.size(1)}, y.options());
  PKB_RETURN_IF_ERROR(ep->AllGatherInto(ys, y));
  return std::vector<at::Tensor>{
      Longs(choices.token, x2.device()),
      AlternativeRows(choices, tied, probs, ys, me, members, maxn, local)};
}

absl::StatusOr<std::vector<std::vector<at::Tensor>>> MoeEpProblem::OracleTieKeys(
    const std::vector<Inputs>& all, const RunConfig& cfg,
    const std::vector<std::vector<at::Tensor>>& expected) const {
  const int world = static_cast<int>(all.size()), ep = EpSize(world);
  const int64_t k = TopK(world), local = NumExperts(world) / ep;
  std::vector<std::vector<at::Tensor>> result(all.size());
  for (int g = 0; g < world / ep; ++g) {
    std::vector<TieChoices> choices;
    std::vector<std::vector<int64_t>> tied;
    std::vector<at::Tensor> x2, probs;
    int64_t maxn = 0;
    for (int i = 0; i < ep; ++i) {
      const Inputs& in = all[g * ep + i];
      x2.push_back(in[kMoeX].reshape({-1, in[kMoeX].size(-1)}));
      probs.push_back(RouterProbs(x2.back(), in[kMoeGateW], in[kMoeGateB]));
      auto [w, sel] = at::topk(probs.back(), k, -1);
      choices.push_back(RoutingTieChoices(probs.back(), {w, sel}, local));
      tied.push_back(TiedTokens(choices.back()));
      maxn = std::max<int64_t>(maxn, static_cast<int64_t>(tied.back().size()));
    }
    if (maxn == 0) {
      for (int i = 0; i < ep; ++i) result[g * ep + i] = NoTieKeys(cfg);
      continue;
    }
    std::vector<at::Tensor> padded, ys;
    for (int i = 0; i < ep; ++i) padded.push_back(PaddedRows(x2[i], tied[i], maxn));
    at::Tensor batch = at::cat(padded, 0);
    for (int d = 0; d < ep; ++d) ys.push_back(ExpertOf(all[g * ep + d])(batch).contiguous());
    at::Tensor all_ys = at::cat(ys, 0);
    for (int i = 0; i < ep; ++i) {
      result[g * ep + i] = {
          Longs(choices[i].token, x2[i].device()),
          AlternativeRows(choices[i], tied[i], probs[i], all_ys, i, ep, maxn, local)};
    }
  }
  return result;
}

absl::StatusOr<std::vector<at::Tensor>> MoeEpProblem::ResolveTies(
    const RunConfig& cfg, const std::vector<at::Tensor>& expected,
    const std::vector<at::Tensor>& keys, const std::vector<at::Tensor>& actual) const {
  if (keys.size() != 2 || actual.size() != 1 || expected.size() != 1) {
    return absl::InternalError(
        absl::StrCat(info().slug, ": ResolveTies takes 2 keys and 1 output"));
  }
  if (keys[0].numel() == 0 || actual[0].sizes() != expected[0].sizes() ||
      actual[0].scalar_type() != expected[0].scalar_type()) {
    return actual;  // no ties, or an output the comparison rejects anyway
  }
  const at::Tensor tokens = keys[0].to(at::kCPU).contiguous();
  const at::Tensor rows = keys[1].to(at::kCPU);
  const at::Tensor want = expected[0].to(at::kCPU);
  at::Tensor got = actual[0].to(at::kCPU).contiguous().clone();
  // Whole rows, element by element: the outlier budget is for the output, not one row.
  Tolerance tol = GetTolerance(cfg, 0);
  tol.outlier_fraction = 0;
  std::set<int64_t> settled;
  for (int64_t a = 0; a < tokens.numel(); ++a) {
    const int64_t t = tokens[a].item<int64_t>();
    if (settled.count(t)) continue;
    if (CompareOutput(got[t], want[t], tol).ok()) {
      settled.insert(t);  // the reference's routing (or one with its owners)
    } else if (CompareOutput(got[t], rows[a], tol).ok()) {
      got[t].copy_(want[t]);
      settled.insert(t);
    }
  }
  return std::vector<at::Tensor>{got.to(actual[0].device())};
}

Roofline MoeEpProblem::GetRoofline(const RunConfig& cfg) const {
  const double b = c10::elementSize(cfg.dtype);
  const double p = EpSize(cfg.world), e = NumExperts(cfg.world), k = TopK(cfg.world);
  const double m = cfg.m, n = cfg.n, inter = kMoeInter;
  const double rows = k * m;  // rows each rank's experts receive on average
  Roofline r;
  // Dispatch and combine each send (P-1)/P of the k M routed rows; the counts all-gather P E.
  r.nvlink_bytes = 2 * (p - 1) / p * k * m * n * b + p * e * 8;
  // x and the router, permuted rows out and back, expert weights, expert in/out, output.
  r.hbm_bytes =
      (m * n + e * n) * b + 4 * k * m * n * b + 3 * inter * n * b + 2 * rows * n * b + m * n * b;
  r.flops = 2 * m * n * e + rows * (6 * n * inter + ExtraExpertFlopsPerRow(cfg)) + 2 * k * m * n;
  return r;
}

}  // namespace pkb
