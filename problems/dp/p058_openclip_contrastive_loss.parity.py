"""Problem 58's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

import torch

from pkb_parity import problem


@problem(58)
def p058(c):
    c.seed()
    b, d = max(1, c.M // max(c.W, 1)), max(16, c.N)
    img, txt = c.randn(b, d), c.randn(b, d)
    norm = torch.nn.functional.normalize
    return [("image_features", norm(img, dim=-1).contiguous()),
            ("text_features", norm(txt, dim=-1).contiguous())]
