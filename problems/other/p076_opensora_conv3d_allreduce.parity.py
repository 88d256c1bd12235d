"""Problem 76's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

import torch

from pkb_parity import problem


# Dumps: PKB's sizes are fixed; ours shrink only below 1024.
@problem(76, shape=(1024, 1024))
def p076(c):
    c.seed()
    cout = next((x for x in (512, 256, 128) if x % c.W == 0), 512)
    cl = cout // c.W
    x = c.randn(1, cl, 19, 66, 66)
    weight = c.randn(cout, cl, 3, 3, 3)
    bias = torch.linspace(-0.1, 0.1, cout, dtype=c.dt, device=c.dev)
    return [("x", x), ("weight", weight), ("bias", bias)]
