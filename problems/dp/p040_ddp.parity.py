"""Problem 40's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

from pkb_parity import mlp_data_and_params, problem


# Dumps: W = 4 too: its ranks differ in role or layout.
@problem(40, also=[(4, 0)])
def p040(c):
    c.seed(rank=0)
    d_in, hid, d_out = max(16, min(c.N, 256)), max(32, min(c.N // 2, 512)), max(8, min(c.N // 4, 256))
    out = mlp_data_and_params(c, d_in, hid, d_out)
    shapes = [(hid, d_in), (hid,), (d_out, hid), (d_out,)]
    for moment in ("exp_avg", "exp_avg_sq"):
        for pname, shape in zip(("W1", "b1", "W2", "b2"), shapes):
            out.append((f"{moment}_{pname}", c.zeros(*shape)))
    return out
