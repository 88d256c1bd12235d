"""Problem 27's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import problem


@problem(27)
def p027(c):
    c.seed()
    return [("local_tensor", c.randn(c.M, c.N))]
