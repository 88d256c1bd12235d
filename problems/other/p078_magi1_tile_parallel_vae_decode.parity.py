"""Problem 78's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

import torch

from pkb_parity import problem


# Dumps: PKB's sizes are fixed; ours shrink only below 1024.
@problem(78, shape=(1024, 1024))
def p078(c):
    c.seed()
    return [("z", c.randn(1, 16, 6, 90, 90, dtype=torch.bfloat16))]  # PKB's fixed latent
