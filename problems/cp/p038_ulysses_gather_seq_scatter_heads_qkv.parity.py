"""Problem 38's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import attn_dims, problem


@problem(38)
def p038(c):
    c.seed()
    b, t, h, d = attn_dims(c)
    return [("qkv_tensor", c.randn(b, t, 3 * h * d))]
