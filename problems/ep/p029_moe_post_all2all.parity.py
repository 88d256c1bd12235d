"""Problem 29's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

import torch

from pkb_parity import balanced_counts, distinct_experts, problem


# Dumps: trial 1 too: the seed's 1000003 t term.
@problem(29, also=[(2, 1)])
def p029(c):
    c.seed()
    picks = distinct_experts(c, c.M)
    rmap = torch.zeros((8, c.M), dtype=torch.bool, device=c.dev)
    tok = torch.arange(c.M, device=c.dev)
    for slot in range(2):
        rmap[picks[:, slot], tok] = True
    routed = int(rmap.sum().item())
    sel = torch.sort(picks, dim=1).values  # the token's two experts, ascending
    weights = torch.stack([c.randn(2).softmax(dim=0) for _ in range(c.M)])
    outputs = c.randn(routed, c.N)
    perm = rmap.nonzero()[:, 1].contiguous()  # tokens in expert-major order
    return [("expert_outputs", outputs), ("routing_weights", weights), ("selected_experts", sel),
            ("num_global_tokens_per_local_expert", balanced_counts(c, routed, c.W)),
            ("routing_map", rmap), ("local_input_permutation_mapping", perm)]
