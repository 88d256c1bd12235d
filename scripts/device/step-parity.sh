#!/usr/bin/env bash
# Inputs bit-identical to PKB's: dump per-rank inputs drawn by libtorch C++ on the GPU and
# redraw them with Python torch, the same calls in the same order, then compare bytes.
BIN=$1; OUT=$2
rm -rf /tmp/dump && mkdir -p /tmp/dump
"$BIN/pkb-eval" -p 13 -w 2 --dump-inputs /tmp/dump/p13
"$BIN/pkb-eval" -p 49 -w 2 --dump-inputs /tmp/dump/p49
"$BIN/pkb-eval" -p 54 -w 2 --dump-inputs /tmp/dump/p54
python3 - <<'PY'
import torch, math
def seed(p, r, t=0): return 42 + 1000 * p + r + 1000003 * t
M = N = 1024; bf = torch.bfloat16; dev = "cuda"
def same(a, path):
    b = torch.load(path)
    ok = a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.cpu().view(torch.uint8) if a.dtype != torch.bool else a.cpu(), b.view(torch.uint8) if b.dtype != torch.bool else b)
    print(("PARITY OK  " if ok else "PARITY BAD ") + path, tuple(a.shape), a.dtype)
for r in range(2):
    torch.manual_seed(seed(13, r))
    A = torch.randn(M, 512, dtype=bf, device=dev); B = torch.randn(512, N, dtype=bf, device=dev)
    same(A, f"/tmp/dump/p13/rank{r}.input.A_local.pt"); same(B, f"/tmp/dump/p13/rank{r}.input.B_local.pt")
for r in range(2):
    torch.manual_seed(seed(54, r))
    S = 16 // 2
    q = torch.randn(16, S, 8, 64, dtype=bf, device=dev); k = torch.randn(16, S, 8, 64, dtype=bf, device=dev); v = torch.randn(16, S, 8, 64, dtype=bf, device=dev)
    for n, t in (("q", q), ("k", k), ("v", v)): same(t, f"/tmp/dump/p54/rank{r}.input.{n}.pt")
for r in range(2):
    torch.manual_seed(seed(49, r))
    E = 2
    x = torch.randn(M, N, dtype=bf, device=dev); gw = torch.randn(E, N, dtype=bf, device=dev); gb = torch.randn(E, dtype=bf, device=dev)
    g = torch.nn.Linear(N, 128); u = torch.nn.Linear(N, 128); d = torch.nn.Linear(128, N)
    for n, t in (("hidden_states", x), ("gate_weight", gw), ("gate_bias", gb)):
        same(t, f"/tmp/dump/p49/rank{r}.input.{n}.pt")
    for mod, key in ((g, "gate_proj"), (u, "up_proj"), (d, "down_proj")):
        for part in ("weight", "bias"):
            same(getattr(mod, part).detach().to(bf).to(dev), f"/tmp/dump/p49/rank{r}.input.{key}.{part}.pt")
PY
