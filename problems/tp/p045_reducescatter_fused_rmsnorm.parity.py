"""Problem 45's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import problem


# Dumps: W = 4 too: its ranks differ in role or layout.
@problem(45, also=[(4, 0)])
def p045(c):
    hidden = max(32, min(c.N, 128))
    rows = max(2, max(c.M, c.W) // max(c.W, 4))
    c.seed(rank=0)
    gamma = c.randn(hidden)
    c.seed()
    return [("rs_input", c.randn(rows * hidden * c.W)), ("gamma", gamma)]
