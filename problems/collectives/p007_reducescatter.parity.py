"""Problem 7's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import problem


@problem(7, service_sets={"x"})
def p007(c):
    return [("x", c.full((c.W * c.M, c.N), float(c.r + 1)))]
