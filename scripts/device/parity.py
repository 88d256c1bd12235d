#!/usr/bin/env python3
"""Input parity with PKB: redraw every rank's inputs as PKB's Python does and compare them, byte
for byte, with the tensors that `pkb-eval -p ID -w W --dump-inputs DIR` wrote.

Each problem's redraw sits beside its .cc, problems/<family>/pNNN_<slug>.parity.py, found here
by that name; scripts/device/pkb_parity.py holds what they share. `--device cuda` draws on the
default CUDA generator (PKB's GPU run, and the GPU build of pkb-eval); `--device cpu` draws on the
CPU generator (the CPU build of pkb-eval).

Usage:
  parity.py --device cuda --dumps ROOT      every sub-folder ROOT/p{ID}-w{W}-m{M}-n{N}-t{T}
  parity.py --device cpu --problem 13 --world 2 [--m M --n N --trial T] DIR
  parity.py --list                          the covered problem ids
  parity.py --plan                          step-parity.sh's dumps: "ID M N W:T,W:T|-" per line

Output: one line per tensor, "PARITY OK" or "PARITY BAD" with shape and dtype (and the first
differing element for BAD ones), then a summary. Exit status 1 if any tensor is BAD.
Non-tensor arguments (Python numbers, lists, groups) are not dumped and not checked. Tensor names
are the C++ dump's; for problems not yet ported they are PKB's variable names (a name mismatch
shows as "not in the dump" plus "dumped, but PKB has no such tensor").
"""
import argparse
import glob
import importlib.util
import os
import re
import sys

import torch

from pkb_parity import PLANS, PROBLEMS, SERVICE_SETS, Ctx

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REDRAWS = "problems/*/p[0-9][0-9][0-9]_*.parity.py"


def load_redraws(root=ROOT):
    """Imports every problem's redraw; each must register its own id (the one in its name)."""
    for path in sorted(glob.glob(os.path.join(root, REDRAWS))):
        base = os.path.basename(path)[: -len(".parity.py")]
        pid = int(base[1:4])
        before = set(PROBLEMS)
        spec = importlib.util.spec_from_file_location(f"parity_{base}", path)
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
        if set(PROBLEMS) - before != {pid}:
            raise SystemExit(f"{path}: registers {sorted(set(PROBLEMS) - before)}, not [{pid}]")


# ---------------------------------------------------------------- comparison

INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def as_ints(t):
    t = t.detach().cpu().contiguous().reshape(-1)
    if t.dtype == torch.bool:
        return t.view(torch.uint8)
    return t.view(INT_OF_SIZE[t.element_size()])


def compare(name, mine, dumped):
    """(ok, text)."""
    desc = f"{tuple(mine.shape)} {str(mine.dtype).replace('torch.', '')}"
    if mine.dtype != dumped.dtype or mine.shape != dumped.shape:
        return False, (f"{desc}: dump has {tuple(dumped.shape)} "
                       f"{str(dumped.dtype).replace('torch.', '')}")
    a, b = as_ints(mine), as_ints(dumped)
    diff = (a != b).nonzero()
    if diff.numel() == 0:
        return True, desc
    i = int(diff[0])
    idx = tuple(int(x) for x in torch.unravel_index(torch.tensor(i), tuple(mine.shape))) \
        if mine.dim() else ()
    ma = mine.detach().cpu().contiguous().reshape(-1)[i]
    mb = dumped.contiguous().reshape(-1)[i]
    return False, (f"{desc}: {diff.numel()} of {a.numel()} elements differ, first at {list(idx)}: "
                   f"python {ma.item()!r} vs dump {mb.item()!r}")


def check_dir(path, pid, world, m, n, trial, device, dtype, totals):
    files = sorted(os.listdir(path))
    dumped_names = {}
    for f in files:
        mt = re.fullmatch(r"rank(\d+)\.input\.(.+)\.pt", f)
        if mt:
            dumped_names.setdefault(int(mt.group(1)), []).append(mt.group(2))
    tag = f"p{pid} W={world} M={m} N={n} t={trial}"
    if pid not in PROBLEMS:
        print(f"PARITY BAD  {tag}: no Python draw for problem {pid}")
        totals["bad"] += 1
        return
    if sorted(dumped_names) != list(range(world)):
        print(f"PARITY BAD  {tag}: dump has ranks {sorted(dumped_names)}, expected 0..{world - 1}")
        totals["bad"] += 1
    for r in range(world):
        ctx = Ctx(pid, m, n, world, r, trial, device, dtype)
        drawn = PROBLEMS[pid](ctx)
        mine_names = [nm for nm, _ in drawn]
        for nm, t in drawn:
            label = f"{tag} rank{r} {nm}"
            fp = os.path.join(path, f"rank{r}.input.{nm}.pt")
            if trial > 0 and nm in SERVICE_SETS.get(pid, ()):
                print(f"PARITY SKIP {label}: the service draws its own set {trial} here by design")
                totals["skip"] += 1
                continue
            if not os.path.exists(fp):
                print(f"PARITY BAD  {label} {tuple(t.shape)} {t.dtype}: not in the dump")
                totals["bad"] += 1
                continue
            ok, text = compare(nm, t, torch.load(fp, map_location="cpu"))
            print(f"PARITY {'OK ' if ok else 'BAD'} {label} {text}")
            totals["ok" if ok else "bad"] += 1
        for nm in dumped_names.get(r, []):
            if nm not in mine_names:
                print(f"PARITY BAD  {tag} rank{r} {nm}: dumped, but PKB has no such tensor")
                totals["bad"] += 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", nargs="?", help="one dump folder (with --problem and --world)")
    ap.add_argument("--dumps", help="folder of dump folders named p{ID}-w{W}-m{M}-n{N}-t{T}")
    ap.add_argument("--device", default="cuda", help="cuda (PKB's GPU draws) or cpu")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--problem", type=int)
    ap.add_argument("--world", type=int)
    ap.add_argument("--m", type=int, default=1024)
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--trial", type=int, default=0, help="pkb-eval --set-offset of the dump")
    ap.add_argument("--list", action="store_true", help="print the covered problem ids")
    ap.add_argument("--plan", action="store_true",
                    help="print step-parity.sh's dumps, one problem a line: ID M N W:T,...|-")
    a = ap.parse_args()
    load_redraws()
    if a.plan:
        for pid in sorted(PLANS):
            (m, n), also = PLANS[pid]
            print(pid, m, n, ",".join(f"{w}:{t}" for w, t in also) or "-")
        return 0
    if a.list:
        print(" ".join(str(p) for p in sorted(PROBLEMS)))
        return 0
    device = torch.device("cuda", 0) if a.device == "cuda" else torch.device(a.device)
    dtype = getattr(torch, a.dtype)
    runs = []
    if a.dumps:
        for d in sorted(os.listdir(a.dumps)):
            mt = re.fullmatch(r"p(\d+)-w(\d+)-m(\d+)-n(\d+)-t(\d+)", d)
            if mt:
                runs.append((os.path.join(a.dumps, d),) + tuple(int(g) for g in mt.groups()))
            else:
                print(f"(ignoring {d}: not p{{ID}}-w{{W}}-m{{M}}-n{{N}}-t{{T}})")
        runs.sort(key=lambda x: x[1:])
    if a.dir:
        if a.problem is None or a.world is None:
            ap.error("a single dump folder needs --problem and --world")
        runs.append((a.dir, a.problem, a.world, a.m, a.n, a.trial))
    if not runs:
        ap.error("nothing to check: give --dumps ROOT or a folder")
    totals = {"ok": 0, "bad": 0, "skip": 0}
    for path, pid, world, m, n, trial in runs:
        check_dir(path, pid, world, m, n, trial, device, dtype, totals)
    covered = sorted({r[1] for r in runs})
    print(f"PARITY SUMMARY device={a.device}: {totals['ok']} OK, {totals['bad']} BAD, "
          f"{totals['skip']} SKIP over {len(runs)} dumps (problems {' '.join(map(str, covered))})")
    return 1 if totals["bad"] else 0


if __name__ == "__main__":
    sys.exit(main())
