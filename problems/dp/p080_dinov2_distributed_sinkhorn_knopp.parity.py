"""Problem 80's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

import torch

from pkb_parity import problem


# Dumps: PKB's sizes are fixed; ours shrink only below 1024.
@problem(80, shape=(1024, 1024))
def p080(c):
    c.seed()
    b = c.M if c.M < 512 else min(c.M, 1024)  # PKB's max(512, min(M, 1024)) from M = 512 on
    kp = 32 * c.M if c.M < 512 else 16384
    teacher = c.randn(b, kp, dtype=torch.float32) * 0.01
    return [("teacher_output", teacher),
            ("n_masked_patches_tensor", torch.full((1,), b, dtype=torch.int64, device=c.dev))]
