"""Problem 59's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

import torch

from pkb_parity import problem, round_up


@problem(59)
def p059(c):
    c.seed(rank=0)  # shared seed: one global field, each rank passes its column slab
    b, h, l = max(1, c.M // 64), round_up(max(16, c.M), c.W), round_up(max(16, c.N), c.W)
    lw = l // c.W
    field = c.randn(b, h, l, dtype=torch.float32)
    return [("x", field[:, :, c.r * lw:(c.r + 1) * lw].contiguous())]
