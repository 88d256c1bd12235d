"""Problem 75's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

import torch

from pkb_parity import problem, round_up


# Dumps: PKB's sizes are fixed; ours shrink only below 1024; W = 4 too: its ranks differ in role or layout.
@problem(75, shape=(1024, 1024), also=[(4, 0)])
def p075(c):
    c.seed()
    h = round_up(6, c.W)
    hl = h // c.W
    key, value = max(1, min(c.M, 1024) // 4), max(1, min(c.N, 1024) // 2)  # PKB's 256, 512
    q, k = c.randn(1, 64, h, key), c.randn(1, 64, h, key)
    v = c.randn(1, 64, h, value)
    gate = c.randn(1, 64, h)
    beta = torch.randn(1, 64, h, dtype=torch.bfloat16, device=c.dev).sigmoid().to(c.dt)
    bf16 = torch.bfloat16
    a = torch.linspace(0, 0.2, h, dtype=bf16, device=c.dev)[c.r * hl:(c.r + 1) * hl]
    dt_b = torch.linspace(-0.1, 0.1, h, dtype=bf16, device=c.dev)[c.r * hl:(c.r + 1) * hl]
    return [("q", q), ("k", k), ("v", v), ("gate", gate), ("beta", beta),
            ("a_log", a.contiguous()), ("dt_bias", dt_b.contiguous())]
