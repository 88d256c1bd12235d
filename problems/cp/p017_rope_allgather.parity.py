"""Problem 17's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import attn_dims, problem


@problem(17)
def p017(c):
    c.seed()
    b, t, h, d = attn_dims(c)
    s = max(1, t // c.W)
    return [("q", c.randn(b, s, h, d)), ("k", c.randn(b, s, h, d)), ("cos", c.randn(b, s, d)),
            ("sin", c.randn(b, s, d))]
