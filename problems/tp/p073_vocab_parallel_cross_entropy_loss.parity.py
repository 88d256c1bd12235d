"""Problem 73's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

import torch

from pkb_parity import problem


@problem(73)
def p073(c):
    c.seed()
    logits = c.randn(8, 1024, 512 // c.W)
    tokens = torch.arange(8 * 1024, dtype=torch.int64, device=c.dev)
    target = ((tokens * 13 + 7 + c.t) % 512).reshape(8, 1024)
    return [("vocab_parallel_logits", logits), ("target", target)]
