"""Problem 67's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

import torch

from pkb_parity import problem, round_up


@problem(67)
def p067(c):
    c.seed()
    nodes = round_up(max(100000, c.M), c.W)
    nnz = max(1024, min(c.M // c.W, 50000))
    hd = max(8, min(c.N, 128))
    idx = torch.randint(0, nodes, (nnz,), device=c.dev)
    return [("idx", idx), ("value", c.randn(nnz, hd))]
