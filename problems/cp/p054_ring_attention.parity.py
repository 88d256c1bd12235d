"""Problem 54's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import attn_dims, problem


# Dumps: 256 x 512, so that B and T differ.
@problem(54, shape=(256, 512))
def p054(c):
    c.seed()
    b, t, h, d = attn_dims(c)  # B and T follow M and N
    s = max(1, t // c.W)
    return [("q", c.randn(b, s, h, d)), ("k", c.randn(b, s, h, d)), ("v", c.randn(b, s, h, d))]
