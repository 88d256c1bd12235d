"""Problem 65's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

import torch

from pkb_parity import exchange_dims, problem


@problem(65)
def p065(c):
    c.seed()
    _, hd, t = exchange_dims(c)
    sd = max(1, t * 3 // 4)
    feats = c.randn(sd, hd)
    ids = torch.randint(0, sd, (t,), device=c.dev)
    return [("local_features", feats), ("seed_inverse_ids", ids)]
