"""Problem 46's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import problem, round_up


# Dumps: W = 4 too: its ranks differ in role or layout.
@problem(46, also=[(4, 0)])
def p046(c):
    c.seed(rank=0)
    tokens = max(1, min(8, c.M // 1024))
    hidden = max(128, min(c.N, 4096))
    vocab = round_up(max(c.M, c.W * 1024), c.W)
    local = vocab // c.W
    sl = slice(c.r * local, (c.r + 1) * local)
    h = c.randn(tokens, hidden)
    w = c.randn(vocab, hidden)[sl].contiguous()
    b = c.randn(vocab)[sl].contiguous()
    return [("hidden_states", h), ("weight_shard", w), ("bias_shard", b)]
