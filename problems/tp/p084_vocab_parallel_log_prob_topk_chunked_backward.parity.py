"""Problem 84's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

import torch

from pkb_parity import problem, topk_inputs


@problem(84, service_sets=["vocab_parallel_logits"])
def p084(c):
    ins = topk_inputs(c, 19, 5)
    bt, seq = ins[1][1].shape
    grad = torch.linspace(-1, 1, bt * seq, dtype=torch.bfloat16, device=c.dev).reshape(bt, seq)
    return ins + [("grad_output", grad)]
