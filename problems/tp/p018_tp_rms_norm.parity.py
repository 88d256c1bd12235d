"""Problem 18's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import problem


@problem(18)
def p018(c):
    c.seed()
    return [("h", c.randn(c.M, c.N)), ("weight", c.randn(c.N))]
