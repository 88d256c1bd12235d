"""Problem 28's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

import torch

from pkb_parity import balanced_counts, distinct_experts, problem


# Dumps: trial 1 too: the seed's 1000003 t term.
@problem(28, also=[(2, 1)])
def p028(c):
    c.seed()
    hidden = c.randn(c.M, c.N)
    picks = distinct_experts(c, c.M)  # (M, 2): slot 0, slot 1
    mask = torch.zeros((8, 2, c.M), dtype=torch.long, device=c.dev)
    tok = torch.arange(c.M, device=c.dev)
    for slot in range(2):
        mask[picks[:, slot], slot, tok] = 1
    mask = mask.float()
    routed = int((mask.sum(dim=1) > 0).sum().item())  # 2M: the two picks are distinct
    return [("hidden_states", hidden), ("expert_mask", mask),
            ("num_global_tokens_per_local_expert", balanced_counts(c, routed, c.W))]
