"""Problem 30's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import problem


@problem(30)
def p030(c):
    c.seed()
    return [("grad_fc1_1_lora_A", c.randn(8, c.N)), ("grad_fc1_2_lora_A", c.randn(8, c.N)),
            ("grad_fc2_lora_B", c.randn(c.N, 8))]
