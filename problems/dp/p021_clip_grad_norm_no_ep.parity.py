"""Problem 21's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import problem


@problem(21)
def p021(c):
    c.seed()
    return [(f"grad_{i}", c.randn(c.M, c.N)) for i in range(3)]
