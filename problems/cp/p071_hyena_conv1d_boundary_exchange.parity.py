"""Problem 71's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import problem


# Dumps: PKB's sizes are fixed; ours shrink only below 1024.
@problem(71, shape=(1024, 1024))
def p071(c):
    c.seed()
    return [("x", c.randn(1, 1024, 2048)), ("weight", c.randn(1024, 1, 7))]
