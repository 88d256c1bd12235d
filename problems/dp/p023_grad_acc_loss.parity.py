"""Problem 23's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

import torch

from pkb_parity import problem


@problem(23, service_sets={"grad_normalized_loss", "grad_loss_sum"})
def p023(c):
    c.seed()
    return [("loss", c.randn()),
            ("local_valid", torch.tensor(c.M * c.N, dtype=torch.long, device=c.dev)),
            ("global_valid", torch.tensor(c.W * c.M * c.N, dtype=torch.long, device=c.dev)),
            ("grad_normalized_loss", torch.ones((), dtype=c.dt, device=c.dev)),
            ("grad_loss_sum", c.zeros())]
