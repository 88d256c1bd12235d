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
from typing import Callable, List, Optional

import pkb


def prompt_for(spec, world_size: int, feedback: Optional[str]) -> str:
    """What the model reads: the problem statement, the signature at this world size, the
    tolerances, and (after the first try) what went wrong last time."""
    layout = next((l for l in spec.layouts if l.world_size == world_size), None)
    parts = [f"# Problem {spec.id}: {spec.slug} (candidate API v{spec.candidate_api_version})",
             spec.statement]
    if layout is not None:
        for r in layout.ranks:
            ins = ", ".join(f"{t.name}{list(t.shape)}:{t.dtype}" for t in r.inputs)
            outs = ", ".join(f"{t.name}{list(t.shape)}:{t.dtype}" for t in r.outputs)
            parts.append(f"rank {r.rank}: inputs {ins} -> outputs {outs}")
    for t in spec.tolerances:
        parts.append(f"tolerance {t.output}: atol {t.atol} rtol {t.rtol}" +
                     (" (exact)" if t.exact else ""))
    if feedback:
        parts.append("## Your last attempt failed or was slow:\n" + feedback)
    return "\n\n".join(parts)


def feedback_from(result) -> str:
    """The verdict as the model should read it: diagnostics, the first bad outputs, timings."""
    lines = [f"verdict {pkb.status_name(result.status)}: {result.message}"]
    for d in result.policy_findings[:20]:  # the source policy (docs/security.md), not the compiler
        lines.append(f"POLICY {d.file}:{d.line}: {d.message}")
    for d in result.compile.diagnostics[:20]:
        lines.append(f"{d.file}:{d.line}:{d.column}: {d.severity}: {d.message}")
    for rt in [t for t in result.rank_trials if not t.ok][:4]:
        lines.append(f"rank {rt.rank} trial {rt.trial}: {rt.error}")
        for o in [o for o in rt.outputs if not o.ok][:4]:
            lines.append(f"  output {o.name}: {o.problem} max_abs {o.max_abs_error:.3g} "
                         f"bad {o.bad_count}/{o.numel} first at {o.first_bad_index} "
                         f"(want {o.expected_at_first_bad:.6g}, got {o.actual_at_first_bad:.6g}) "
                         f"nan {o.nan_count} unwritten {o.unwritten_count}")
    if result.status == pkb.OK:
        lines.append(f"candidate median {result.candidate.median_us:.2f} us, baseline "
                     f"{result.baseline.median_us:.2f} us, speedup {result.speedup:.3f}x")
    if result.failed_rank_log:
        lines.append("log tail:\n" + result.failed_rank_log[-2000:])
    return "\n".join(lines)


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
