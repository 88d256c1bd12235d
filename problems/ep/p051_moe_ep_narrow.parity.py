"""Problem 51's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import moe_router_and_mlp, problem


# Dumps: W = 4 too: its ranks differ in role or layout.
@problem(51, also=[(4, 0)])
def p051(c):
    c.seed()
    e = next((e for e in range(c.W // 2, 1, -1) if c.W % e == 0), 1)
    return moe_router_and_mlp(c, e)
