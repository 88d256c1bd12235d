"""Problem 82's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import problem, topk_inputs


# Dumps: W = 4 too: its ranks differ in role or layout.
@problem(82, service_sets=["vocab_parallel_logits"], also=[(4, 0)])
def p082(c):
    return topk_inputs(c, 17, 3)
