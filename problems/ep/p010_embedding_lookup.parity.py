"""Problem 10's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

import torch

from pkb_parity import problem


@problem(10)
def p010(c):
    c.seed()
    shard = c.randn(c.M, c.N)  # drawn first, passed second
    idx = torch.randint(0, c.W * c.M, (c.M,), dtype=torch.long, device=c.dev)
    return [("indices", idx), ("local_shard", shard)]
