"""Problem 5's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

import torch

from pkb_parity import problem


# Dumps: W = 4 too: its ranks differ in role or layout.
@problem(5, service_sets={"x"}, also=[(4, 0)])
def p005(c):
    if c.r == 0:
        return [("x", torch.stack([c.full((c.M, c.N), float(i + 1)) for i in range(c.W)]))]
    return [("x", c.zeros(c.M, c.N))]
