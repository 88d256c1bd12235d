"""Problem 31's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import moe_router_and_mlp, problem


@problem(31)
def p031(c):
    c.seed()
    return moe_router_and_mlp(c, 8)
