"""Problem 85's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

import torch

from pkb_parity import problem


# Dumps: trial 3 empties the odd ranks' shards; W = 4 too: its ranks differ in role or layout.
@problem(85, also=[(4, 0), (2, 3)])
def p085(c):
    c.seed()
    n = max(4 * c.W, min(c.M // c.W, 4096))
    if c.t % 4 == 3 and c.r % 2 == 1:
        n = 0
    values = torch.randint(-50, 50, (n,), device=c.dev).to(c.dt) - c.r * max(1, n)
    return [("local_shard", values)]
