"""Problem 20's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import problem


# Dumps: W = 4 too: its ranks differ in role or layout.
@problem(20, also=[(4, 0)])
def p020(c):
    c.seed()
    return [("y", c.randn(c.W, c.M, c.N)), ("s", c.randn(c.W, c.M * c.N // 128))]
