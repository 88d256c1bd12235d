"""Problem 39's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import attn_dims, problem


@problem(39)
def p039(c):
    c.seed()
    b, t, h, d = attn_dims(c)
    s = max(1, t // c.W)
    return [("hidden_states", c.randn(b, s, h * d)), ("w_qkv", c.randn(3 * h * d, h * d)),
            ("w_o", c.randn(h * d, h * d))]
