"""Problem 74's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

import torch

from pkb_parity import problem


# Dumps: PKB's sizes are fixed; ours shrink only below 1024; W = 4 too: its ranks differ in role or layout.
@problem(74, service_sets=["g"], shape=(1024, 1024), also=[(4, 0)])
def p074(c):
    c.seed()
    key = max(1, min(c.M, 1024) // 8)  # 128 at PKB's M = N = 1024
    value = max(1, min(c.N, 1024) // 8)
    q, k = c.randn(1, 64, 16, key), c.randn(1, 64, 16, key)
    v, g = c.randn(1, 64, 16, value), c.randn(1, 64, 16, key)
    beta = c.randn(1, 64, 16)
    bf16 = torch.bfloat16
    a_log = torch.linspace(-0.1, 0.1, 16, dtype=bf16, device=c.dev)
    dt_bias = torch.linspace(-0.1, 0.1, 16 * key, dtype=bf16, device=c.dev)
    return [("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta), ("a_log", a_log),
            ("dt_bias", dt_bias)]
