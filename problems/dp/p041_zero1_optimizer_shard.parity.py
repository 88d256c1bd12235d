"""Problem 41's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import zero_mlp_inputs, problem


# Dumps: W = 4 too: its ranks differ in role or layout.
problem(41, also=[(4, 0)])(zero_mlp_inputs)
