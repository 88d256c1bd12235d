"""Problem 44's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import problem


@problem(44)
def p044(c):
    c.seed()
    return [("flat_grad", c.randn(max(c.M * c.N, 64 * c.W)))]
