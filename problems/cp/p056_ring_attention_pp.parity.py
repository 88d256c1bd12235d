"""Problem 56's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import problem, reseed


# Dumps: W = 4 too: its ranks differ in role or layout.
@problem(56, also=[(4, 0)])
def p056(c):
    # CP groups are contiguous stage blocks, PP groups strided. Seeds use 57.
    pp = min(2, c.W)
    cp = c.W // pp
    cp_rank, pp_rank = c.r % cp, c.r // cp
    b, t = max(1, c.M // 64), max(1, c.N // 64)
    s = max(1, t // cp)
    reseed(c, 42 + 57000 + cp_rank)
    hidden = c.randn(b, s, 512)
    reseed(c, 42 + 57000 + 20000 + pp_rank)
    w_qkv = c.randn(1536, 512) * 0.02
    w_o = c.randn(512, 512) * 0.02
    return [("hidden_states", hidden), ("w_qkv", w_qkv), ("w_o", w_o)]
