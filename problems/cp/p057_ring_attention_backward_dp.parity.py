"""Problem 57's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

import torch

from pkb_parity import attn_dims, problem, reseed


# Dumps: W = 4 too: its ranks differ in role or layout.
@problem(57, also=[(4, 0)])
def p057(c):
    # DP groups strided, CP groups contiguous (Megatron 'cp-dp'). Seeds use 58.
    b, t, h, d = attn_dims(c)
    dp = min(2, c.W)
    cp = c.W // dp
    cp_rank, dp_rank = c.r % cp, c.r // cp
    s = max(1, t // cp)
    reseed(c, 42 + 58000 + 100 * dp_rank + cp_rank)
    q, k, v, dout = (c.randn(b, s, h, d) for _ in range(4))
    qh, kh, vh = (x.transpose(1, 2).float() for x in (q, k, v))
    scores = torch.matmul(qh, kh.transpose(-2, -1)) * (d ** -0.5)
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.matmul(torch.softmax(scores, dim=-1), vh).transpose(1, 2).contiguous().to(c.dt)
    return [("dout", dout), ("q", q), ("k", k), ("v", v), ("out", out), ("softmax_lse", lse)]
