// Problem 64 — distributed GNN neighbour sampling (PyG torch_geometric.distributed's structure):
// two hops of deterministic one-hop sampling, each a request/reply all-to-all-v with the nodes'
// owners, then relabelling by first appearance. Every output's length depends on the data.
#include <algorithm>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

enum : size_t { kSeeds, kColptr, kRow, kNodeToRank };                // tensor inputs, in call order
enum : int { kU, kRowOut, kColOut, kEdge, kNodeCount, kEdgeCount };  // outputs

constexpr int64_t kDegree = 16;  // row has kDegree * Nn entries; PKB's every node has this degree
constexpr int64_t kFanouts[] = {10, 5};

struct Sizes {
  int64_t nodes, seeds;
};

// Nn = roundup(max(10000, min(M, 100000)), W); S = max(512, min(N/W, 2048)).
Sizes SizesOf(const RunConfig& cfg) {
  const int64_t w = cfg.world;
  const int64_t base = std::max<int64_t>(10000, std::min<int64_t>(cfg.m, 100000));
  return {(base + w - 1) / w * w, std::max<int64_t>(512, std::min<int64_t>(cfg.n / w, 2048))};
}

// Capacities. Hop 1 samples at most 10 neighbours of each of the S seeds, hop 2 at most 5 of
// each of the at most 10 S new nodes: at most 60 S edges. U holds the S seeds and the new nodes
// of both hops, at most S + 10 S + 50 S, and distinct node ids, at most Nn.
int64_t EdgeCapacity(const Sizes& s) { return kFanouts[0] * s.seeds * (1 + kFanouts[1]); }
int64_t NodeCapacity(const Sizes& s) { return std::min(s.nodes, s.seeds + EdgeCapacity(s)); }

std::vector<int64_t> ToHost(const at::Tensor& t) {
  at::Tensor c = t.to(at::kCPU).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

at::Tensor LongTensor(const std::vector<int64_t>& v, at::Device device) {
  return at::tensor(v, at::TensorOptions().dtype(at::kLong)).to(device);
}

int64_t Sum(const std::vector<int64_t>& v) {
  int64_t s = 0;
  for (int64_t x : v) s += x;
  return s;
}

// The positions start[i] .. start[i] + count[i] - 1, concatenated over i.
at::Tensor Runs(const at::Tensor& start, const at::Tensor& count) {
  const int64_t total = count.sum().item<int64_t>();
  at::Tensor first = count.cumsum(0) - count;  // where run i begins in the result
  at::Tensor pos = at::arange(total, count.options());
  return at::repeat_interleave(start - first, count, 0, total) + pos;
}

// U extended by the values of `out` not yet in it, in order of first appearance; returns the
// new values (the next frontier). PKB dedups cat(U, out) with np.unique and takes the frontier
// as the entries past U's old length; U never holds a duplicate here, so the two agree.
std::vector<int64_t> AppendNew(std::vector<int64_t>& u, std::unordered_map<int64_t, int64_t>& pos,
                               const std::vector<int64_t>& out) {
  std::vector<int64_t> fresh;
  for (int64_t v : out) {
    if (pos.emplace(v, static_cast<int64_t>(u.size())).second) {
      u.push_back(v);
      fresh.push_back(v);
    }
  }
  return fresh;
}

class GnnNeighborSampling : public Problem {
 public:
  const ProblemInfo& info() const override {
    static const ProblemInfo i{
        64,
        "64_gnn_neighbor_sampling",
        1,
        "distributed GNN neighbour sampler with remote one-hop sampling and relabelling (the "
        "structure of PyG torch_geometric.distributed)",
        "other",
        R"md(Two hops of distributed neighbour sampling over WORLD (fanouts [10, 5], no
replacement), then relabelling. Any W.

- Sizes: Nn = roundup(max(10000, min(M, 100000)), W) nodes; S = max(512, min(N/W,
  2048)) seeds per rank; the CSC graph is replicated on every rank.
- Inputs, in call order (every rank seeds with the same seed):
  `seed_nodes` (S,) int64, `colptr` (Nn+1,) int64, `row` (16*Nn,) int64, `node_to_rank`
  (Nn,) int64; scalars fanouts[0] = 10, fanouts[1] = 5, replace = 0.
  Set 0 (PKB's, no RNG): node_to_rank[v] = v mod W; colptr[v] = 16v; row[16v + j] =
  (v + j + 1) mod Nn (j < 16); seed_nodes = (r*S + arange(S)) mod Nn.
  Other sets (drawn on the device in this order, identical on every rank):
  node_to_rank = randint[0, W) (Nn,); degrees d = randint[0, 17) (Nn,), colptr =
  [0, cumsum(d)] (row's entries past colptr[Nn] are unused); row = randint[0, Nn)
  (16*Nn,); p = randperm(Nn) and seed_nodes = p[(r*S + arange(S)) mod Nn]. Degrees below
  the fanout, degree 0, repeated neighbours and shared neighbours all occur; a rank's
  seeds are distinct.
- Computation on rank r: frontier F = seed_nodes, node list U = seed_nodes. For each
  fanout k while F is not empty: (1) group F by owner node_to_rank[v], stably; exchange
  the counts (all_to_all_single), then the node ids (all_to_all_single with those
  splits). (2) The owner samples each node v it received: its first t = min(k, deg v)
  neighbours row[colptr[v] + 0..t-1], with edge ids colptr[v] + 0..t-1. (3) It replies
  with the sampled nodes, edge ids and per-node counts (all_to_all_single, variable
  splits); the requester puts the replies back in F's order. (4) out_node = the
  concatenation over F (in order) of each node's sample, out_dst = each F node repeated
  by its count, out_edge likewise. If out_node is empty, stop. (5) Append to U the
  out_node values not in U yet, in order of first appearance; those values, in that
  order, are the next F. Finally relabel by position in U: row = pos(out_node of every
  hop, hops concatenated), col = pos(out_dst of every hop).
- Outputs on rank r, in order: `node` U (cap_U,) int64, `row`, `col`, `edge` (cap_E,)
  int64 each, then `node_count` 0-d int64 = |U| and `edge_count` 0-d int64 = the
  number of sampled edges. The lengths depend on the data: the candidate writes them
  to `node_count` (for `node`) and `edge_count` (for `row`, `col`, `edge`). Capacities:
  cap_E = 60 S (at most 10 per seed, then 5 per new node, at most 10 S new nodes),
  cap_U = min(Nn, 61 S). Counts are compared exactly, then only the first count rows.
- Integers: exact. Set 0 has a closed form (no wrap-around at the defaults: |U| = S + 15,
  E = 10 S + 50); the other sets do not, so hard-coding it fails.
- Host syncs in PKB's reference: every split list is read back; PKB samples node by node
  in Python.
- Traffic: about 8 (2 + 2k) |F| (W-1)/W bytes per hop (|F| = S, then the new nodes).
  FLOPs: 0.)md"};
    return i;
  }

  // Every rank draws the replicated graph from one seed (PKB seeds with rank 0's).
  uint64_t Seed(int rank, int set) const override {
    return 42 + 1000ull * info().id + 1000003ull * set;
  }

  absl::Status CanImplement(const RunConfig& cfg) const override {
    return RequirePositiveShape(cfg);
  }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override {
    const Sizes s = SizesOf(cfg);
    auto longs = at::TensorOptions().dtype(at::kLong).device(cfg.device);
    at::Tensor node_to_rank, colptr, row, seeds;
    at::Tensor seed_pos = (at::arange(s.seeds, longs) + rank * s.seeds).remainder(s.nodes);
    if (set == 0) {
      node_to_rank = at::arange(s.nodes, longs).remainder(cfg.world);
      colptr = at::arange(s.nodes + 1, longs) * kDegree;
      row = (at::arange(s.nodes, longs).unsqueeze(1) + at::arange(1, kDegree + 1, longs))
                .remainder(s.nodes)
                .reshape({-1});
      seeds = seed_pos;
    } else {
      node_to_rank = at::randint(0, cfg.world, {s.nodes}, longs);
      at::Tensor degree = at::randint(0, kDegree + 1, {s.nodes}, longs);
      colptr = at::cat({at::zeros({1}, longs), degree.cumsum(0)});
      row = at::randint(0, s.nodes, {kDegree * s.nodes}, longs);
      seeds = at::randperm(s.nodes, longs).index_select(0, seed_pos);
    }
    Inputs in;
    in.Add("seed_nodes", seeds);
    AddIntList(in, "fanouts", {kFanouts[0], kFanouts[1]});
    in.Add("colptr", colptr);
    in.Add("row", row);
    in.Add("node_to_rank", node_to_rank);
    in.scalars.push_back(ScalarArg::Int("replace", 0));
    return in;
  }

  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    const Sizes s = SizesOf(cfg);
    const int64_t cap_u = NodeCapacity(s), cap_e = EdgeCapacity(s);
    return {{"node", {cap_u}, at::kLong, kNodeCount},
            {"row", {cap_e}, at::kLong, kEdgeCount},
            {"col", {cap_e}, at::kLong, kEdgeCount},
            {"edge", {cap_e}, at::kLong, kEdgeCount},
            {"node_count", {}, at::kLong},
            {"edge_count", {}, at::kLong}};
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override {
    const int64_t w = comm.size();
    const at::Tensor &colptr = in[kColptr], &row = in[kRow], &owner_of = in[kNodeToRank];
    const at::Device dev = colptr.device();
    PKB_ASSIGN_OR_RETURN(std::vector<int64_t> fanouts, IntList(in, "fanouts"));
    at::Tensor frontier = in[kSeeds].clone();
    std::vector<int64_t> u = ToHost(frontier);
    std::unordered_map<int64_t, int64_t> pos;
    for (size_t i = 0; i < u.size(); ++i) pos.emplace(u[i], static_cast<int64_t>(i));
    std::vector<at::Tensor> node_dupl, dst_dupl, edges;
    for (int64_t k : fanouts) {
      if (frontier.numel() == 0) break;
      // (1) Requests, grouped by owner (a stable sort keeps F's order within an owner).
      at::Tensor owner = owner_of.index_select(0, frontier);
      at::Tensor order = std::get<1>(owner.sort(/*stable=*/true, 0, false));
      at::Tensor send_counts = at::bincount(owner, {}, w);
      at::Tensor recv_counts = at::empty_like(send_counts);
      PKB_RETURN_IF_ERROR(comm.AllToAllSingle(recv_counts, send_counts, {}, {}));
      std::vector<int64_t> send_splits = ToHost(send_counts), recv_splits = ToHost(recv_counts);
      at::Tensor request = frontier.index_select(0, order).contiguous();
      at::Tensor received = at::empty({Sum(recv_splits)}, request.options());
      PKB_RETURN_IF_ERROR(comm.AllToAllSingle(received, request, recv_splits, send_splits));
      // (2) The owner's deterministic sample: the first min(k, deg) neighbours.
      at::Tensor start = colptr.index_select(0, received);
      at::Tensor take = (colptr.index_select(0, received + 1) - start).clamp_max(k);
      at::Tensor sampled_edges = Runs(start, take);
      at::Tensor sampled_nodes = row.index_select(0, sampled_edges);
      // (3) Replies: per requester, its nodes' samples and their counts.
      std::vector<int64_t> take_host = ToHost(take), reply_send_splits;
      for (int64_t s = 0, i = 0; s < w; ++s) {
        int64_t n = 0;
        for (int64_t j = 0; j < recv_splits[s]; ++j) n += take_host[i++];
        reply_send_splits.push_back(n);
      }
      at::Tensor reply_send = LongTensor(reply_send_splits, dev);
      at::Tensor reply_recv = at::empty_like(reply_send);
      PKB_RETURN_IF_ERROR(comm.AllToAllSingle(reply_recv, reply_send, {}, {}));
      std::vector<int64_t> reply_recv_splits = ToHost(reply_recv);
      at::Tensor reply_nodes = at::empty({Sum(reply_recv_splits)}, request.options());
      at::Tensor reply_edges = at::empty_like(reply_nodes);
      at::Tensor reply_counts = at::empty({Sum(send_splits)}, request.options());
      PKB_RETURN_IF_ERROR(comm.AllToAllSingle(reply_nodes, sampled_nodes.contiguous(),
                                              reply_recv_splits, reply_send_splits));
      PKB_RETURN_IF_ERROR(comm.AllToAllSingle(reply_edges, sampled_edges.contiguous(),
                                              reply_recv_splits, reply_send_splits));
      PKB_RETURN_IF_ERROR(
          comm.AllToAllSingle(reply_counts, take.contiguous(), send_splits, recv_splits));
      // Back in F's order: grouped position g(i) of frontier entry i is the inverse of `order`.
      at::Tensor grouped = at::empty_like(order);
      grouped.index_put_({order}, at::arange(order.numel(), order.options()));
      at::Tensor chunk_start = reply_counts.cumsum(0) - reply_counts;
      at::Tensor counts = reply_counts.index_select(0, grouped);
      at::Tensor gather = Runs(chunk_start.index_select(0, grouped), counts);
      at::Tensor out_node = reply_nodes.index_select(0, gather);
      if (out_node.numel() == 0) break;
      node_dupl.push_back(out_node);
      dst_dupl.push_back(at::repeat_interleave(frontier, counts));
      edges.push_back(reply_edges.index_select(0, gather));
      // (5) New nodes, in order of first appearance, are the next frontier.
      frontier = LongTensor(AppendNew(u, pos, ToHost(out_node)), dev);
    }
    return Relabel(u, node_dupl, dst_dupl, edges, dev);
  }

  // Every rank's sampling in turn: each request is answered from its owner's copy of the graph.
  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override {
    std::vector<std::vector<int64_t>> colptr, row;
    for (const Inputs& in : all) {
      colptr.push_back(ToHost(in[kColptr]));
      row.push_back(ToHost(in[kRow]));
    }
    std::vector<std::vector<at::Tensor>> res;
    for (const Inputs& in : all) {
      std::vector<int64_t> owner = ToHost(in[kNodeToRank]), frontier = ToHost(in[kSeeds]);
      PKB_ASSIGN_OR_RETURN(std::vector<int64_t> fanouts, IntList(in, "fanouts"));
      std::vector<int64_t> u = frontier;
      std::unordered_map<int64_t, int64_t> pos;
      for (size_t i = 0; i < u.size(); ++i) pos.emplace(u[i], static_cast<int64_t>(i));
      std::vector<at::Tensor> node_dupl, dst_dupl, edges;
      for (int64_t k : fanouts) {
        if (frontier.empty()) break;
        std::vector<int64_t> out_node, out_dst, out_edge;
        for (int64_t v : frontier) {
          const std::vector<int64_t>& cp = colptr[owner[v]];
          for (int64_t e = cp[v]; e < cp[v] + std::min(k, cp[v + 1] - cp[v]); ++e) {
            out_node.push_back(row[owner[v]][e]);
            out_dst.push_back(v);
            out_edge.push_back(e);
          }
        }
        if (out_node.empty()) break;
        node_dupl.push_back(LongTensor(out_node, at::kCPU));
        dst_dupl.push_back(LongTensor(out_dst, at::kCPU));
        edges.push_back(LongTensor(out_edge, at::kCPU));
        frontier = AppendNew(u, pos, out_node);
      }
      PKB_ASSIGN_OR_RETURN(std::vector<at::Tensor> out,
                           Relabel(u, node_dupl, dst_dupl, edges, at::kCPU));
      res.push_back(std::move(out));
    }
    return res;
  }

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override {
    static const char* const kWhy[] = {"Node ids in order of first appearance: exact.",
                                       "Positions in U of the sampled nodes: exact.",
                                       "Positions in U of the sampling nodes: exact.",
                                       "Edge ids (CSC positions): exact.",
                                       "The number of nodes in U: exact.",
                                       "The number of sampled edges: exact."};
    return {0, 0, true, kWhy[index]};
  }

  // Set 0: hop 1 requests S nodes and returns 10 each, hop 2 requests 10 and returns 5 each.
  Roofline GetRoofline(const RunConfig& cfg) const override {
    const Sizes s = SizesOf(cfg);
    const double f = static_cast<double>(cfg.world - 1) / cfg.world;
    const double hop1 = 8.0 * (2 + 2 * kFanouts[0]) * s.seeds;
    const double hop2 = 8.0 * (2 + 2 * kFanouts[1]) * kFanouts[0];
    const double edges = kFanouts[0] * (s.seeds + kFanouts[1]);
    Roofline r;
    r.nvlink_bytes = f * (hop1 + hop2);
    // Read colptr twice and row and write edge ids per sampled edge, then U, row, col, edge.
    r.hbm_bytes =
        8.0 * (2 * (s.seeds + kFanouts[0]) + 2 * edges) + 8.0 * (s.seeds + 15) + 3 * 8.0 * edges;
    r.flops = 0;
    return r;
  }

 private:
  // row/col: positions in U of the sampled and the sampling nodes, hops concatenated.
  static absl::StatusOr<std::vector<at::Tensor>> Relabel(const std::vector<int64_t>& u,
                                                         const std::vector<at::Tensor>& node_dupl,
                                                         const std::vector<at::Tensor>& dst_dupl,
                                                         const std::vector<at::Tensor>& edges,
                                                         at::Device dev) {
    auto longs = at::TensorOptions().dtype(at::kLong).device(dev);
    at::Tensor node = LongTensor(u, dev);
    at::Tensor nodes = node_dupl.empty() ? at::empty({0}, longs) : at::cat(node_dupl);
    at::Tensor dsts = dst_dupl.empty() ? at::empty({0}, longs) : at::cat(dst_dupl);
    at::Tensor edge = edges.empty() ? at::empty({0}, longs) : at::cat(edges);
    at::Tensor assoc = at::full({*std::max_element(u.begin(), u.end()) + 1}, -1, longs);
    assoc.index_put_({node}, at::arange(node.numel(), longs));
    at::Tensor row = assoc.index_select(0, nodes), col = assoc.index_select(0, dsts);
    if (row.numel() > 0 && (row.min().item<int64_t>() < 0 || col.min().item<int64_t>() < 0)) {
      return absl::InternalError("a sampled or sampling node is missing from U");
    }
    return std::vector<at::Tensor>{node,
                                   row,
                                   col,
                                   edge,
                                   at::scalar_tensor(node.numel(), longs),
                                   at::scalar_tensor(edge.numel(), longs)};
  }
};
PKB_REGISTER_PROBLEM(GnnNeighborSampling);

}  // namespace
}  // namespace pkb
