"""Problem 61's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

import torch

from pkb_parity import problem


@problem(61, service_sets=["means", "viewmats"])
def p061(c):
    c.seed()
    n = max(1000, min(c.M, 10000))
    iw, ih = max(64, min(c.N, 512)), max(64, min(c.M, 512))
    bf = torch.bfloat16
    means = torch.empty(n, 3, dtype=bf, device=c.dev)
    means[:, 0] = (torch.rand(n, dtype=bf, device=c.dev) - 0.5) * 1.5
    means[:, 1] = (torch.rand(n, dtype=bf, device=c.dev) - 0.5) * 1.5
    means[:, 2] = torch.rand(n, dtype=bf, device=c.dev) * 2 + 2
    quats = torch.randn(n, 4, dtype=bf, device=c.dev)
    scales = torch.rand(n, 3, dtype=bf, device=c.dev) * 0.02
    opacities = torch.rand(n, dtype=bf, device=c.dev) * 0.8 + 0.1
    colors = torch.rand(n, 3, dtype=bf, device=c.dev)
    viewmats = torch.eye(4, dtype=bf, device=c.dev).reshape(1, 4, 4)
    f = 0.8 * min(iw, ih)
    ks = torch.tensor([[f, 0, iw / 2], [0, f, ih / 2], [0, 0, 1]], dtype=bf,
                      device=c.dev).reshape(1, 3, 3)
    return [("means", means), ("quats", quats), ("scales", scales), ("opacities", opacities),
            ("colors", colors), ("viewmats", viewmats), ("Ks", ks)]
