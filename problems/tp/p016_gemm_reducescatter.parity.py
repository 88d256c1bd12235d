"""Problem 16's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import problem


@problem(16)
def p016(c):
    c.seed()
    return [("A_local", c.randn(c.M, 512 // c.W)), ("B_local", c.randn(512 // c.W, c.N))]
