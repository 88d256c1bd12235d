"""Problem 32's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import moe_router_and_mlp, problem


@problem(32)
def p032(c):
    c.seed()
    out = moe_router_and_mlp(c, 8)
    for name, shape in (("lora_gate_A", (8, c.N)), ("lora_gate_B", (128, 8)),
                        ("lora_up_A", (8, c.N)), ("lora_up_B", (128, 8)),
                        ("lora_down_A", (8, 128)), ("lora_down_B", (c.N, 8))):
        out.append((name, c.randn(*shape)))
    return out
