"""Problem 49's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import moe_router_and_mlp, problem


# Dumps: trial 1 too: the seed's 1000003 t term.
@problem(49, also=[(2, 1)])
def p049(c):
    c.seed()
    return moe_router_and_mlp(c, max(1, c.W))
