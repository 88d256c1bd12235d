"""Problem 79's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

import torch

from pkb_parity import problem


# Dumps: W = 4 too: its ranks differ in role or layout.
@problem(79, also=[(4, 0)])
def p079(c):
    c.seed()
    q = max(32, min(c.M // 64, 256))
    nt = max(1024, min(16 * c.N // c.W, 16384))
    df = 1024 if c.N >= 8192 else 768 if c.N >= 4096 else 384
    norm = torch.nn.functional.normalize
    test = norm(c.randn(q, df, dtype=torch.bfloat16), dim=1)
    train = norm(c.randn(nt, df, dtype=torch.bfloat16), dim=1)
    labels = ((c.r * nt + torch.arange(nt, device=c.dev)) % 1000).view(1, nt)
    return [("test", test.to(c.dt).contiguous()), ("train_t", train.to(c.dt).t().contiguous()),
            ("labels", labels)]
