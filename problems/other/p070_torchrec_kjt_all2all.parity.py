"""Problem 70's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

import torch

from pkb_parity import problem


# Dumps: W = 4 too: its ranks differ in role or layout.
@problem(70, also=[(4, 0)])
def p070(c):
    c.seed()
    ks = [1 + d % 3 for d in range(c.W)]
    b = max(512, min(c.M // c.W, 1024))
    lengths = torch.randint(5, 21, (sum(ks), b), device=c.dev).reshape(-1)
    values = torch.randint(0, 1000000, (int(lengths.sum().item()),), device=c.dev)
    return [("lengths", lengths), ("values", values)]
