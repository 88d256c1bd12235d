"""Problem 12's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import allgather_gemm_inputs, problem


problem(12)(allgather_gemm_inputs)
