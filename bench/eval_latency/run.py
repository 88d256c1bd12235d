#!/usr/bin/env python3
"""bench/eval_latency: one evaluation end to end, stage by stage, with the ranks started while the
source compiles (the default), one stage after the other (--serial-compile), and on an engine
started ahead of the job (pkb-eval --standby, as the worker runs it).

    python3 bench/eval_latency/run.py --pkb-eval build/worker/engine/pkb-eval \
        --runs 3 --out /tmp/lat -- -p 1 -w 1 problems/examples/p001_allreduce_symm.cu

Everything after `--` goes to pkb-eval as is (the problem, W, the source, -I for CPU
candidates...). Mode `standby` (with --standby-shape W:BACKEND, as 2:cpu or 1:cuda) starts
`pkb-eval --standby` first, waits --standby-gap seconds (a worker's time between jobs), then hands
it the job through a FIFO: its wall clock runs from the job's hand-over to the engine's exit, as a
worker sees it. Each run of a mode is cold (an empty compile cache of its own, with the GPU probe's
answer that a node keeps across jobs copied in from one priming run) then warm (the same cache
again). Printed: one line per run and a table of medians; every result is kept as JSON under
--out. The columns, from the result's stage_seconds and the process's wall clock:

- verdict: from exec (or the job's hand-over) to pkb-eval's verdict line (its DONE event), which
  the worker passes on at once: it may come before the rank processes have ended;
- wall: pkb-eval from exec to exit, when the worker can start its next job;
- compile: the compiler (cache lookup on warm runs);
- ranks: the launcher's run of the W rank processes, from their start to the verdict (to their
  end where the verdict waited for it; with the overlap, the part spent while the source compiled
  is `during compile`);
- start+end: ranks less verify and benchmark: process starts, libtorch, devices, communicators,
  the candidate's load, teardown;
- device, comms, host_ready, host_load (within start+end, the slowest rank's): the judge's device
  (CUDA context, stream), its communicators, the wait for the candidate's process to have set up
  its own (made while the judge's were), and loading the submission (its pkb_init);
- early: standby ranks that set up their devices and world communicators (and their hosts') while
  they waited for the job (pkb-rank --device-early): how long that took, before the job (no part
  of wall);
- engine: wall less compile and ranks where they did not overlap: pkb-eval's own start, the
  checks, the GPU probe, the lock, the verdict, clean-up.
Then a second table: the benchmark in parts (stage_seconds.bench_*): drawing and placing the timed
sets, the candidate's warm-up, its rounds, the spot checks after them, the reference's rounds and
graph, the profile passes; and three parts of start_end: spec_wait (from the spec written to the
last rank having it: a standby's wait, or a fresh rank's own start), other (from the last rank
having the spec to its last report, less verify and benchmark: the ranks' set-up for the job and
their reports) and exit (from the last report written to every rank process gone, where the
verdict waited for it; 0 where it came first); and
before_spec, the job's own steps before its spec was written (part of ranks for a standby).
--keep-logs DIR keeps each run's scratch folder, with its rank logs, under DIR.
Only the standard library is used.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


# The benchmark stage in parts (stage_seconds.bench_*, the slowest rank's each).
BENCH_PARTS = ["inputs", "warmup", "window", "checks", "reference", "profile"]


def read_events(p, t0):
    """pkb-eval --events: the result from its DONE line and when that line came (seconds after
    t0), then the process's end: (result, verdict_s, wall_s, stderr, rc)."""
    result, verdict = None, None
    for line in p.stdout:
        try:
            e = json.loads(line)
        except json.JSONDecodeError:
            continue
        if e.get("stage") == "DONE" and result is None:
            verdict = time.perf_counter() - t0
            result = e.get("result", {})
    p.wait()
    wall = time.perf_counter() - t0
    p.stderr.seek(0)
    return result, verdict, wall, p.stderr.read(), p.returncode


def run_once(pkb_eval, args, cache, mode, shape=None, gap=2.0, scratch=None):
    common = ["--events", "--cache-dir", cache]
    if scratch:
        os.makedirs(scratch, exist_ok=True)
        common += ["--keep-scratch", "--scratch", scratch]
    err = tempfile.TemporaryFile(mode="w+")
    if mode == "standby":
        fifo_dir = tempfile.mkdtemp(prefix="eval-latency-fifo-")
        fifo = os.path.join(fifo_dir, "job.fifo")
        os.mkfifo(fifo)
        p = subprocess.Popen([pkb_eval, "--standby", shape, "--job-from", fifo] + common,
                             stdout=subprocess.PIPE, stderr=err, text=True)
        time.sleep(gap)
        t0 = time.perf_counter()
        with open(fifo, "w") as f:
            f.write(json.dumps(args) + "\n")
        p.stderr = err
        r, verdict, wall, p_stderr, rc = read_events(p, t0)
        shutil.rmtree(fifo_dir, ignore_errors=True)
    else:
        cmd = [pkb_eval] + common + (["--serial-compile"] if mode == "serial" else []) + args
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
        p.stderr = err
        r, verdict, wall, p_stderr, rc = read_events(p, t0)
    if r is None:
        sys.exit(f"pkb-eval gave no verdict (exit {rc}): {p_stderr[-2000:]}")
    st = r.get("stage_seconds", {})
    compile_s = st.get("compile", 0.0)
    ranks = st.get("run", 0.0)
    during = st.get("ranks_during_compile", 0.0)
    row = {
        "status": r.get("status"),
        "wall": wall,
        "verdict": verdict,
        "compile": compile_s,
        "cache_hit": bool(r.get("compile", {}).get("cache_hit", False)),
        "ranks": ranks,
        "during_compile": during,
        "verify": st.get("verify", 0.0),
        "benchmark": st.get("benchmark", 0.0),
        "device": st.get("rank_device", 0.0),
        "comms": st.get("rank_comms", 0.0),
        "host_ready": st.get("host_ready", 0.0),
        "host_load": st.get("host_load", 0.0),
        "early": st.get("rank_early", 0.0),
    }
    for part in BENCH_PARTS:
        row[part] = st.get("bench_" + part, 0.0)
    row["spec_wait"] = st.get("rank_spec_wait", 0.0)
    row["other"] = st.get("rank_other", 0.0)
    row["exit"] = st.get("rank_exit", 0.0)
    row["before_spec"] = st.get("job_before_spec", 0.0)
    row["start_end"] = ranks - row["verify"] - row["benchmark"] - during
    # What the stages above leave of the wall clock: with the overlap, compile and the ranks'
    # first `during` seconds ran at once.
    row["engine"] = wall - ranks - compile_s + min(during, compile_s)
    return r, row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pkb-eval", default="build/worker/engine/pkb-eval")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=None, help="folder for the results (JSON)")
    ap.add_argument("--modes", default="overlap,serial",
                    help="any of overlap, serial, standby (which needs --standby-shape)")
    ap.add_argument("--standby-shape", default=None, help="W:BACKEND of the standby ranks")
    ap.add_argument("--standby-gap", type=float, default=2.0,
                    help="seconds between the standby engine's start and the job")
    ap.add_argument("--keep-logs", default=None,
                    help="keep each run's scratch folder (its rank logs) under this folder")
    ap.add_argument("pkb_eval_args", nargs=argparse.REMAINDER)
    o = ap.parse_args()
    args = o.pkb_eval_args[1:] if o.pkb_eval_args[:1] == ["--"] else o.pkb_eval_args
    if "standby" in o.modes.split(",") and not o.standby_shape:
        ap.error("mode standby needs --standby-shape W:BACKEND")
    out = o.out or tempfile.mkdtemp(prefix="eval-latency-")
    os.makedirs(out, exist_ok=True)
    cols = ["verdict", "wall", "compile", "ranks", "during_compile", "start_end", "device", "comms",
            "host_ready", "host_load", "early", "verify", "benchmark", "engine"]
    table = {}
    # A cold run is a source the node has not compiled, on a node that has run jobs before: its
    # GPU probe's answer (gpu-probe/ in the cache folder, kept per boot and driver) is there. One
    # priming run, not counted, makes it; each run's fresh cache gets a copy.
    primer = tempfile.mkdtemp(prefix="eval-latency-primer-")
    run_once(o.pkb_eval, args, primer, "overlap")
    for mode in o.modes.split(","):
        for i in range(1, o.runs + 1):
            cache = tempfile.mkdtemp(prefix="eval-latency-cache-")
            if os.path.isdir(os.path.join(primer, "gpu-probe")):
                shutil.copytree(os.path.join(primer, "gpu-probe"), os.path.join(cache, "gpu-probe"))
            try:
                for temp in ("cold", "warm"):
                    scratch = (os.path.join(o.keep_logs, f"{mode}-{temp}-{i}")
                               if o.keep_logs else None)
                    r, row = run_once(o.pkb_eval, args, cache, mode, o.standby_shape,
                                      o.standby_gap, scratch)
                    with open(f"{out}/{mode}-{temp}-{i}.json", "w") as f:
                        json.dump(r, f, indent=1)
                    table.setdefault((mode, temp), []).append(row)
                    print(f"{mode:8s} {temp} {i}: {row['status']} "
                          + ", ".join(f"{c} {row[c]:.2f}" for c in cols)
                          + (" (cache hit)" if row["cache_hit"] else ""), flush=True)
            finally:
                shutil.rmtree(cache, ignore_errors=True)
    print()
    print("| mode | cache | " + " | ".join(cols) + " |")
    print("|---|---|" + "---|" * len(cols))
    for (mode, temp), rows in table.items():
        med = [statistics.median(r[c] for r in rows) for c in cols]
        print(f"| {mode} | {temp} | " + " | ".join(f"{m:.2f}" for m in med) + " |")
    print("\nThe benchmark in parts (medians):\n")
    parts = ["benchmark"] + BENCH_PARTS + ["spec_wait", "other", "exit", "before_spec"]
    print("| mode | cache | " + " | ".join(parts) + " |")
    print("|---|---|" + "---|" * len(parts))
    for (mode, temp), rows in table.items():
        med = [statistics.median(r[c] for r in rows) for c in parts]
        print(f"| {mode} | {temp} | " + " | ".join(f"{m:.3f}" for m in med) + " |")
    shutil.rmtree(primer, ignore_errors=True)
    print(f"\nmedians of {o.runs} run(s) each, seconds; results in {out}")


if __name__ == "__main__":
    main()
