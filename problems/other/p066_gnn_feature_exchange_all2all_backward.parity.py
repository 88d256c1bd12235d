"""Problem 66's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

import torch

from pkb_parity import exchange_dims, problem


@problem(66)
def p066(c):
    c.seed()
    _, hd, t = exchange_dims(c)
    sd = max(1, t // 2)
    grad = c.randn(t, hd, dtype=torch.float32)
    ids = torch.randint(0, sd, (t,), device=c.dev)
    return [("grad_output", grad), ("seed_inverse_ids", ids)]
