"""Problem 13's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import problem


# Dumps: trial 1 too: the seed's 1000003 t term.
@problem(13, also=[(2, 1)])
def p013(c):
    c.seed()
    return [("A_local", c.randn(c.M, 512)), ("B_local", c.randn(512, c.N))]
