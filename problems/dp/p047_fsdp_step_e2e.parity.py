"""Problem 47's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

import torch

from pkb_parity import mlp_data_and_params, mlp_dims_divisible, problem


# Dumps: W = 4 too: its ranks differ in role or layout.
@problem(47, also=[(4, 0)])
def p047(c):
    c.seed(rank=0)
    d_in, hid, d_out = mlp_dims_divisible(c)
    part = (hid * d_in + hid + d_out * hid + d_out) // c.W
    data = mlp_data_and_params(c, d_in, hid, d_out)
    flat = torch.cat([t.reshape(-1) for _, t in data[2:]])
    return data[:2] + [("flat_param_shard", flat[c.r * part:(c.r + 1) * part].contiguous()),
                       ("exp_avg_shard", c.zeros(part)), ("exp_avg_sq_shard", c.zeros(part))]
