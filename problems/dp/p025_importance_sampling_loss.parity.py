"""Problem 25's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

import torch

from pkb_parity import problem


@problem(25, service_sets={"hidden_states", "labels", "old_logprobs", "advantages"})
def p025(c):
    c.seed()
    v = 32000
    hidden = c.randn(c.M, c.N)
    weight = c.randn(v, c.N)
    labels = torch.randint(0, v, (c.M,), dtype=torch.long, device=c.dev)
    return [("hidden_states", hidden), ("weight", weight), ("labels", labels),
            ("old_logprobs", c.randn(c.M)), ("advantages", c.randn(c.M))]
