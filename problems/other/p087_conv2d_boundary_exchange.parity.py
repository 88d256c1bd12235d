"""Problem 87's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import problem


# Dumps: PKB's sizes are fixed; ours shrink only below 1024.
@problem(87, shape=(1024, 1024))
def p087(c):
    c.seed()
    ch = (320, 640, 1280)[min(c.N // 512, 2)]
    hl = max(3, 128 // max(1, c.W // 2))
    return [("x", c.randn(1, ch, hl, 128)), ("weight", c.randn(ch, ch, 3, 3)),
            ("bias", c.randn(ch))]
