"""Problem 22's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import problem


# Dumps: W = 4 too: its ranks differ in role or layout.
@problem(22, also=[(4, 0)])
def p022(c):
    c.seed()
    return [("non_ep_grad", c.randn(c.M, c.N)), ("ep_grad", c.randn(c.M, c.N))]
