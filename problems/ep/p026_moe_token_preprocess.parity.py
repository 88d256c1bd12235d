"""Problem 26's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

import torch

from pkb_parity import problem


@problem(26)
def p026(c):
    c.seed()
    sel = torch.randint(0, 8, (c.M, 2), device=c.dev)  # int64
    mask = torch.nn.functional.one_hot(sel, 8).float().permute(2, 1, 0)
    return [("expert_mask", mask)]
