"""Problem 14's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import problem


@problem(14)
def p014(c):
    c.seed()
    return [("A", c.randn(c.M, 512)), ("B", c.randn(512, c.N // c.W))]
