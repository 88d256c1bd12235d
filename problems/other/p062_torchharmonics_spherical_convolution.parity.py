"""Problem 62's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

import torch

from pkb_parity import problem, round_up


# Dumps: PKB's sizes are fixed; ours shrink only below 1024; W = 4 too: its ranks differ in role or layout.
@problem(62, shape=(1024, 1024), also=[(4, 0)])
def p062(c):
    c.seed()
    az = 2 if c.W % 2 == 0 else 1
    polar = c.W // az
    nlat = round_up(128, polar)  # PKB's fixed grid (parity runs at M = N = 1024)
    nlon = round_up(2 * nlat, az)
    lat_l, lon_l = nlat // polar, nlon // az
    f32 = torch.float32
    x = c.randn(32, 8, lat_l, lon_l, dtype=f32)
    weight = c.randn(8, 8, 3, dtype=f32)
    bias = c.randn(8, dtype=f32)
    nnz = 3 * nlat * 4
    vals = c.randn(nnz, dtype=f32) * 0.05
    p = c.r // az
    rows = []
    for k in range(3):
        for o in range(nlat):
            ell = (o - p * lat_l) % lat_l
            for e in range(4):
                rows.append((k, o, ell * nlon + (o + e * (k + 1)) % nlon))
    idx = torch.tensor(rows, dtype=torch.int64, device=c.dev).t()
    psi = torch.sparse_coo_tensor(idx, vals, (3, nlat, lat_l * nlon)).coalesce()
    return [("x", x), ("psi_indices", psi.indices()), ("psi_values", psi.values()),
            ("weight", weight), ("bias", bias)]
