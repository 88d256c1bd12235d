"""Problem 19's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import problem


@problem(19)
def p019(c):
    c.seed()
    return [("x", c.randn(c.M, c.N))]
