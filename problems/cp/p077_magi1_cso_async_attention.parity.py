"""Problem 77's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

import torch

from pkb_parity import problem


# Dumps: PKB's sizes are fixed; ours shrink only below 1024.
@problem(77, service_sets=["query"], shape=(1024, 1024))
def p077(c):
    c.seed()
    hq, lc = (24, 12150) if c.W <= 4 else (48, 21600)
    if hq % c.W:
        hq = c.W * max(1, hq // c.W)
    hkv = 8 if (8 % c.W == 0 or c.W % 8 == 0) else c.W
    lc = max(1, lc * min(c.N, 1024) // 1024)
    t = 4 * ((lc + c.W - 1) // c.W)
    da = torch.bfloat16 if c.dt in (torch.bfloat16, torch.float16) else c.dt
    query = torch.randn(t, hq, 128, dtype=da, device=c.dev)
    key = torch.randn(t, hkv, 128, dtype=da, device=c.dev)
    value = torch.randn_like(key)
    starts = torch.arange(4, dtype=torch.int64, device=c.dev) * lc
    return [("query", query), ("key_value", torch.cat([key, value], -1)),
            ("k_ranges", torch.stack([starts, starts + lc], 1))]
