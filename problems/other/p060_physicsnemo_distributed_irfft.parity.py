"""Problem 60's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

import torch

from pkb_parity import problem


# Dumps: PKB's sizes are fixed; ours shrink only below 1024.
@problem(60, shape=(1024, 1024))
def p060(c):
    # PKB's sizes are fixed (2 x 10 x 720 x 1440); parity runs at M = N = 1024 where ours are too.
    c.seed(rank=0)
    hw = 720 // c.W
    field = c.randn(2, 10, 720, 1440, dtype=torch.float32)
    spectrum = torch.fft.rfft2(field, s=(720, 1440), dim=(-2, -1), norm="ortho")
    return [("x", spectrum[:, :, c.r * hw:(c.r + 1) * hw, :].contiguous())]
