"""Problem 15's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import problem, round_up


# Dumps: W = 4 too: its ranks differ in role or layout.
@problem(15, also=[(4, 0)])
def p015(c):
    c.seed()
    rows, hidden = round_up(c.M, c.W), round_up(256, c.W)
    return [("x_local", c.randn(rows, hidden // c.W)), ("W1", c.randn(hidden, 512)),
            ("W2", c.randn(512, hidden))]
