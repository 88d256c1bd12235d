"""Problem 81's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

import torch

from pkb_parity import problem


# Dumps: PKB's sizes are fixed; ours shrink only below 1024; W = 4 too: its ranks differ in role or layout.
@problem(81, service_sets=["low_res_masks_local", "obj_scores_local"], shape=(1024, 1024), also=[(4, 0)])
def p081(c):
    c.seed()
    counts = [1 + (i + c.t) % 3 for i in range(c.W)]
    n = counts[c.r]
    side = 256  # PKB's masks (parity runs at M = 1024)
    masks = c.randn(n, side, side)
    y = torch.arange(side, device=c.dev).view(1, side, 1)
    x = torch.arange(side, device=c.dev).view(1, 1, side)
    i = torch.arange(n, device=c.dev).view(n, 1, 1)
    pat = ((y + x + i + c.r) % 5 == 0).to(c.dt)
    masks = masks + 4 * pat - 1
    scores = torch.linspace(-5, 5, n, dtype=c.dt, device=c.dev)
    last = torch.arange(sum(counts), dtype=torch.int64, device=c.dev) % 5 - 1
    return [("low_res_masks_local", masks), ("obj_scores_local", scores),
            ("last_occluded", last)]
