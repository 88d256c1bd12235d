"""Problem 64's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

import torch

from pkb_parity import problem, round_up


@problem(64, service_sets=["seed_nodes", "colptr", "row", "node_to_rank"])
def p064(c):
    # No RNG in PKB's inputs (the shared seed is set but unused).
    nodes = round_up(max(10000, min(c.M, 100000)), c.W)
    s = max(512, min(c.N // c.W, 2048))
    ar = torch.arange(nodes, dtype=torch.int64, device=c.dev)
    row = ((ar.unsqueeze(1) + torch.arange(1, 17, device=c.dev)) % nodes).reshape(-1)
    seeds = (c.r * s + torch.arange(s, dtype=torch.int64, device=c.dev)) % nodes
    colptr = torch.arange(nodes + 1, dtype=torch.int64, device=c.dev) * 16
    return [("seed_nodes", seeds), ("colptr", colptr), ("row", row), ("node_to_rank", ar % c.W)]
