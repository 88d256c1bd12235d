"""Problem 55's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import problem, reseed


# Dumps: W = 4 too: its ranks differ in role or layout.
@problem(55, also=[(4, 0)])
def p055(c):
    # TP groups are contiguous pairs, CP groups strided (Megatron 'tp-cp'). Seeds use 56.
    tp = min(2, c.W)
    cp = c.W // tp
    tp_rank, cp_rank = c.r % tp, c.r // tp
    b, t = max(1, c.M // 64), max(1, c.N // 64)
    s, hl = max(1, t // cp), 8 // tp
    reseed(c, 42 + 56000 + cp_rank)
    hidden = c.randn(b, s, 512)
    reseed(c, 42 + 56000 + 10000 + tp_rank)
    w_qkv = c.randn(3 * hl * 64, 512) * 0.02
    w_o = c.randn(512, hl * 64) * 0.02
    return [("hidden_states", hidden), ("w_qkv", w_qkv), ("w_o", w_o)]
