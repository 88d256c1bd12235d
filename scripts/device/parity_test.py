#!/usr/bin/env python3
"""parity.py finds one redraw per problem: every problems/<family>/pNNN_<slug>.cc has a
pNNN_<slug>.parity.py beside it that registers that id, every redraw has a dump plan, and every
global name a redraw uses is defined where it runs (its imports).

Runs on machines without a GPU build of torch: where `import torch` fails, a stand-in module lets
the redraws load (nothing is drawn here; the GPU step compares the draws)."""
import builtins
import dis
import glob
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
try:
    import torch  # noqa: F401
except Exception:  # a CPU machine whose torch wheel lacks its CUDA libraries, or no torch
    stand_in = types.ModuleType("torch")
    stand_in.__getattr__ = lambda name: object()
    sys.modules["torch"] = stand_in

import parity  # noqa: E402
from pkb_parity import PLANS, PROBLEMS  # noqa: E402

parity.load_redraws()
sources = glob.glob(os.path.join(parity.ROOT, "problems", "*", "p[0-9][0-9][0-9]_*.cc"))
ids = sorted(int(os.path.basename(p)[1:4]) for p in sources)
problems = sorted(PROBLEMS)
missing = sorted(set(ids) - set(problems))
extra = sorted(set(problems) - set(ids))
assert not missing, f"problems without a redraw (pNNN_<slug>.parity.py beside the .cc): {missing}"
assert not extra, f"redraws of problems that do not exist: {extra}"
assert sorted(PLANS) == problems
for path in glob.glob(os.path.join(parity.ROOT, parity.REDRAWS)):
    assert os.path.exists(path[: -len(".parity.py")] + ".cc"), f"{path}: no .cc beside it"


def global_names(code):
    for ins in dis.get_instructions(code):
        if ins.opname == "LOAD_GLOBAL":
            yield ins.argval
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            yield from global_names(const)


for pid, draw in PROBLEMS.items():
    undefined = {name for name in global_names(draw.__code__)
                 if name not in draw.__globals__ and not hasattr(builtins, name)}
    assert not undefined, f"problem {pid}'s redraw uses undefined names: {sorted(undefined)}"
print(f"{len(problems)} problems, one redraw each")
