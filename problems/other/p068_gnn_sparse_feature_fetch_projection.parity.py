"""Problem 68's inputs as PKB's Python draws them, for scripts/device/parity.py (which
finds this file beside the problem's .cc and compares the draw with pkb-eval's dump)."""

import torch

from pkb_parity import problem, round_up


@problem(68)
def p068(c):
    # PKB's table is 111M rows (28 GB per rank at W = 2): parity runs at M = 256, where the
    # service's documented rule below M = 1024 gives 512 M rows and 16 M queries.
    c.seed()
    small = c.M < 1024
    ntot = round_up(max(512 * c.M if small else 111000000, c.M), c.W)
    sh = ntot // c.W
    e = 256 if c.N >= 256 else (128 if c.N >= 128 else c.N)
    q = max(16 * c.M if small else 20000, min(c.M // c.W, 200000))
    shard = c.randn(sh, e)
    proj = c.randn(e, e)
    i = torch.arange(q, dtype=torch.int64, device=c.dev)
    ids = ((i + c.r) % c.W) * sh + (7 * i + c.r) % sh
    return [("local_embedding_shard", shard), ("input_node_ids", ids), ("proj_matrix", proj)]
