"""Problem 72's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

import torch

from pkb_parity import problem


# Dumps: PKB's sizes are fixed; ours shrink only below 1024.
@problem(72, service_sets=["h", "conv_bias"], shape=(1024, 1024))
def p072(c):
    c.seed()
    ch, chunk = 1024, 1024  # PKB's fixed sizes (parity runs at M = N = 1024)
    filt = 4 * chunk
    xs = [(name, c.randn(1, ch, 2 * chunk)) for name in ("x1", "x2", "v")]
    bf16 = torch.bfloat16
    h = (torch.arange(ch * filt, dtype=bf16, device=c.dev).reshape(ch, filt) / filt).to(c.dt)
    bias = (torch.arange(ch, dtype=bf16, device=c.dev) / ch).to(c.dt)
    return xs + [("h", h), ("conv_bias", bias)]
