#!/usr/bin/env python3
"""An agent loop on the PKB service: read a problem's spec, write a kernel, submit it, read the
verdict, and retry with the feedback until it is correct and fast (or the budget is spent).

The model is any callable ``write_kernel(prompt: str) -> str`` that returns one CUDA C++ file.
Plug in your LLM there. Run without one, this script replays candidate files from a folder in
order (a stand-in model), which is how the SDK's tests exercise it:

    pip install client/python
    python3 docs/examples/agent_loop.py --coordinator 127.0.0.1:7311 --problem 1_allreduce \
        --world-size 8 --candidates my_attempts/ --model my-model
"""
from __future__ import annotations

import argparse
import pathlib
import sys
from typing import Callable, List

import pkb
# The prompt (statement, pkb_run's inputs/scalars/outputs, tolerances, the headers and a worked
# example) and the feedback (diagnostics, bad outputs, timings, roofline) come with the SDK.
from pkb.agent import feedback_from, prompt_for


def agent_loop(client: pkb.Client, problem: str, world_size: int,
               write_kernel: Callable[[str], str], *, attempts: int = 5, target_speedup: float = 1.0,
               model: str = "", agent: str = "pkb-example-loop/1", tags=()) -> List:
    """Tries up to ``attempts`` kernels; stops at the first correct one faster than
    ``target_speedup``. Returns the DONE events of every attempt."""
    spec = client.problem(problem)
    history, feedback = [], None
    for attempt in range(1, attempts + 1):
        source = write_kernel(prompt_for(spec, world_size, feedback))
        done = None
        for event in client.submit(spec.id, source, world_size, model=model, agent=agent,
                                   tags=list(tags)):
            print(f"[attempt {attempt}] {pkb.stage_name(event.stage):12} {event.message}",
                  file=sys.stderr)
            done = event
        if done is None or done.stage != pkb.DONE:  # Client.submit ends at DONE or raises
            raise RuntimeError(f"attempt {attempt}: the job's stream ended without a verdict")
        history.append(done)
        result = done.result
        if result.status == pkb.OK and result.speedup > target_speedup:
            break
        feedback = feedback_from(result)
    return history


def replay_model(folder: str) -> Callable[[str], str]:
    """A stand-in model: returns the files of ``folder`` in name order, one per call."""
    files = sorted(p for p in pathlib.Path(folder).iterdir() if p.is_file())
    it = iter(files)

    def write_kernel(prompt: str) -> str:
        try:
            return next(it).read_text()
        except StopIteration:
            raise SystemExit("the stand-in model has no candidate left") from None
    return write_kernel


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--coordinator", default=None, help="host:port (env PKB_COORDINATOR)")
    ap.add_argument("--token", default=None, help="bearer token (env PKB_TOKEN)")
    ap.add_argument("--problem", required=True, help="id or slug")
    ap.add_argument("--world-size", type=int, required=True)
    ap.add_argument("--candidates", required=True, help="folder of .cu files (stand-in model)")
    ap.add_argument("--attempts", type=int, default=5)
    ap.add_argument("--target-speedup", type=float, default=1.0)
    ap.add_argument("--model", default="replay")
    ap.add_argument("--tag", action="append", default=[])
    a = ap.parse_args(argv)
    problem = int(a.problem) if a.problem.isdigit() else a.problem
    with pkb.Client(a.coordinator, token=a.token) as client:
        history = agent_loop(client, problem, a.world_size, replay_model(a.candidates),
                             attempts=a.attempts, target_speedup=a.target_speedup, model=a.model,
                             tags=a.tag)
    last = history[-1].result
    print(f"{len(history)} attempts; last: {pkb.status_name(last.status)} "
          f"speedup {last.speedup:.3f}x (job {history[-1].job_id})")
    return 0 if last.status == pkb.OK else 1


if __name__ == "__main__":
    sys.exit(main())
