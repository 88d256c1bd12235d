"""Problem 86's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

import torch

from pkb_parity import problem, round_up


@problem(86)
def p086(c):
    c.seed()
    cg = round_up(512 if c.N < 4096 else 1024, c.W)
    x = c.randn(512, cg // c.W, dtype=torch.bfloat16) + 0.01 * c.r
    return [("x", x)]
