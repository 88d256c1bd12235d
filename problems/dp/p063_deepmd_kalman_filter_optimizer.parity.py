"""Problem 63's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

import torch

from pkb_parity import problem


# Dumps: PKB's sizes are fixed; ours shrink only below 1024.
@problem(63, service_sets=[f"P_{i}" for i in range(8)], shape=(1024, 1024))
def p063(c):
    c.seed()
    f64 = torch.float64
    h, w, p = [], [], []
    for _ in range(8):
        h.append(c.randn(1024, 1, dtype=f64) * 0.01)
        w.append(c.randn(1024, 1, dtype=f64))
        p.append(torch.eye(1024, dtype=f64, device=c.dev))
    err = torch.randn((), dtype=f64, device=c.dev)
    return ([(f"H_{i}", h[i]) for i in range(8)] + [("error", err)] +
            [(f"weights_{i}", w[i]) for i in range(8)] + [(f"P_{i}", p[i]) for i in range(8)])
