"""Problem 9's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import problem


# Dumps: trial 1 too: the seed's 1000003 t term.
@problem(9, also=[(2, 1)])
def p009(c):
    c.seed()
    x = c.randn(c.M, c.N)
    x_hat = x / (x.norm(dim=-1, keepdim=True) + 1e-5)  # in the dtype
    return [("X_hat", x_hat), ("dY", c.randn(c.M, c.N))]
