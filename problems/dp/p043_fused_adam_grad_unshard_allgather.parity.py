"""Problem 43's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import problem


# Dumps: W = 4 too: its ranks differ in role or layout.
@problem(43, also=[(4, 0)])
def p043(c):
    c.seed(rank=0)
    p = max(64, min(c.M * 64, 4096))
    sl = slice(c.r * p, (c.r + 1) * p)
    grad = c.randn(p * c.W)[sl].contiguous()
    master = c.randn(p * c.W)[sl].contiguous()
    return [("grad_shard", grad), ("master_shard", master), ("exp_avg", c.zeros(p)),
            ("exp_avg_sq", c.zeros(p))]
