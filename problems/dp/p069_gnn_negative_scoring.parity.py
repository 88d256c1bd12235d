"""Problem 69's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import problem


# Dumps: W = 4 too: its ranks differ in role or layout.
@problem(69, also=[(4, 0)])
def p069(c):
    c.seed()
    p = max(16, min(c.M // c.W, 1280)) + c.r % 3
    nn = max(100, min(c.N, 1000))
    return [("local_pos_scores", c.randn(p)), ("local_neg_scores", c.randn(p, nn))]
