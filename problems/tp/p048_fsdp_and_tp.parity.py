"""Problem 48's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

import math

from pkb_parity import problem, round_up, tp_fsdp


# Dumps: W = 4 too: its ranks differ in role or layout.
@problem(48, also=[(4, 0)])
def p048(c):
    c.seed(rank=0)
    n_tp, n_fsdp = tp_fsdp(c.W)
    d = round_up(max(32, min(c.N, 256)), math.lcm(n_tp, n_fsdp))
    f = round_up(max(64, c.M), n_tp)
    b_tot = round_up(max(2 * c.M, 2 * c.W), n_fsdp)
    bf = b_tot // n_fsdp
    tp_rank, fsdp_rank = c.r % n_tp, c.r // n_tp
    x = c.randn(b_tot, d)[fsdp_rank * bf:(fsdp_rank + 1) * bf].contiguous()
    w1, w2, w3 = c.randn(d, f), c.randn(d, f), c.randn(f, d)
    dr, dc = d // n_fsdp, f // n_tp
    cols = slice(tp_rank * dc, (tp_rank + 1) * dc)
    rows = slice(fsdp_rank * dr, (fsdp_rank + 1) * dr)
    return [("x_local", x), ("W1_shard", w1[rows, cols].contiguous()),
            ("W2_shard", w2[rows, cols].contiguous()), ("W3_shard", w3[cols, rows].contiguous())]
