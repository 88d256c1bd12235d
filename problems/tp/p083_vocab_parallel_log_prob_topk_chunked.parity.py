"""Problem 83's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import problem, topk_inputs


@problem(83, service_sets=["vocab_parallel_logits"])
def p083(c):
    return topk_inputs(c, 19, 5)
