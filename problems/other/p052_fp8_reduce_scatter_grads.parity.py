"""Problem 52's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

import torch

from pkb_parity import problem


@problem(52)
def p052(c):
    c.seed()
    p = max(64, min(c.M * 64, 4096))
    return [("flat_grads", c.randn(p * c.W)),
            ("amax_history", c.full((16,), 1e-8, dtype=torch.bfloat16))]
