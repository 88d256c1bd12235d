"""Problem 8's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

import torch

from pkb_parity import problem


# Dumps: W = 4 too: its ranks differ in role or layout.
@problem(8, service_sets={"x"}, also=[(4, 0)])
def p008(c):
    return [("x", torch.stack([c.full((c.M, c.N), float(10 * c.r + d)) for d in range(c.W)]))]
