"""Problem 24's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import problem


# Dumps: trial 1 too: the seed's 1000003 t term.
@problem(24, service_sets={"gate_logits"}, also=[(2, 1)])
def p024(c):
    c.seed()
    return [("gate_logits", c.randn(c.M, 8))]
