"""Problem 37's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import randn_attention_dims, problem


problem(37)(randn_attention_dims)
