"""Problem 2's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import filled_with_rank, problem


problem(2, service_sets={"x"})(filled_with_rank)
