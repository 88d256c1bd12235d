#!/usr/bin/env bash
# Jobs per hour per GPU through the whole service: a coordinator (SQLite) and one worker on this
# node, and the nine worked examples (problems 1, 2 and 13: correct, wrong, not compiling)
# submitted ROUNDS times each, all at once, W = 1, uncached. The worker runs them one after the
# other (one job per node), each on the engine it started ahead (standby) where the last job's
# shape fits. Printed: each job's verdict, its wall clock from submit to verdict and whether it
# ran on a standby engine; for OK jobs, the reference timed in the job against the node's baseline,
# how many compile tasks ran beside the job and the waits for the worker's word to time; then the
# wall clock from the first submit to the last verdict and jobs per hour per GPU.
#   bench/throughput/run.sh LAYOUT [ROUNDS=3] [OUT=/tmp/pkb-throughput]
# LAYOUT holds server/pkb-coordinator, worker/daemon/pkb-worker, worker/engine/pkb-eval and
# client/pkb (a build folder, or the links scripts/device/step-throughput.sh makes).
# PKB_THROUGHPUT_COLD=1: each submission's source gets a comment line of its own, so that every
# compile is new to the node's cache (an agent's loop submits new sources). PKB_COORDINATOR_FLAGS:
# more flags for the coordinator (e.g. --compile-ahead=false); PKB_WORKER_FLAGS: for the worker
# (e.g. --compile-slots 4: three queued jobs compile ahead). PKB_THROUGHPUT_EXAMPLES="p001 p002":
# only the examples whose names start so (default: all nine).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
layout=$(cd "$1" && pwd)
rounds=${2:-3}
out=${3:-/tmp/pkb-throughput}
mkdir -p "$out"
gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | grep -c . || true)
work=$(mktemp -d /tmp/pkb-throughput.XXXXXX)
chmod 711 "$work"
pids=()
cleanup() {
  for (( i=${#pids[@]}-1; i>=0; i-- )); do
    kill -TERM "${pids[$i]}" 2>/dev/null || continue
    for _ in $(seq 300); do kill -0 "${pids[$i]}" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "${pids[$i]}" 2>/dev/null || true
  done
  cp "$work"/*.log "$out/" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
"$layout/server/pkb-coordinator" --listen 127.0.0.1:0 --port-file "$work/port" \
  --db "$work/jobs.db" --engine "$layout/worker/engine/pkb-eval" ${PKB_COORDINATOR_FLAGS:-} \
  >"$work/coordinator.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [[ -s "$work/port" ]] && break; sleep 0.1; done
address="127.0.0.1:$(cat "$work/port")"
"$layout/worker/daemon/pkb-worker" --coordinator "$address" \
  --engine "$layout/worker/engine/pkb-eval" --scratch "$work" ${PKB_WORKER_FLAGS:-} \
  >"$work/worker.log" 2>&1 &
pids+=($!)
sleep 1  # the worker registers

start=$(date +%s.%N)
jobs=()
for round in $(seq "$rounds"); do
  for src in "$root"/problems/examples/p0*.cu; do
    name=$(basename "$src" .cu)
    if [[ -n "${PKB_THROUGHPUT_EXAMPLES:-}" ]]; then
      keep=""
      for prefix in $PKB_THROUGHPUT_EXAMPLES; do [[ "$name" == "$prefix"* ]] && keep=1; done
      [[ -n "$keep" ]] || continue
    fi
    problem=$((10#${name:1:3}))
    tag="$name-$round"
    if [[ -n "${PKB_THROUGHPUT_COLD:-}" ]]; then
      mkdir -p "$work/sources"
      { cat "$src"; echo "// $tag $(date +%s%N)"; } > "$work/sources/$tag.cu"
      src="$work/sources/$tag.cu"
    fi
    (
      t0=$(date +%s.%N)
      "$layout/client/pkb" --coordinator "$address" --json submit "$src" --problem "$problem" \
        --world-size 1 --no-cache > "$out/$tag.jsonl" 2> "$out/$tag.err" || true
      echo "$t0 $(date +%s.%N)" > "$out/$tag.time"
    ) &
    jobs+=("$tag")
    sleep 0.05  # the submission order is the queue's
  done
done
wait_for=("${jobs[@]}")
for tag in "${wait_for[@]}"; do
  while [[ ! -s "$out/$tag.time" ]]; do sleep 0.1; done
done
end=$(date +%s.%N)
python3 - "$out" "$start" "$end" "${gpus:-1}" "${jobs[@]}" <<'PY'
import json, sys
out, start, end, gpus, tags = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), max(1, int(sys.argv[4])), sys.argv[5:]
walls, standby, hits = [], 0, 0
for tag in tags:
    t0, t1 = map(float, open(f"{out}/{tag}.time").read().split())
    status, ahead, compiled, timed = "no verdict", "", "", ""
    for line in open(f"{out}/{tag}.jsonl"):
        try:
            e = json.loads(line)
        except ValueError:
            continue
        r = e.get("result") or (e.get("job") or {}).get("result")
        if r and r.get("status"):
            status = r["status"]
            if "ranks_ahead_of_job" in r.get("stageSeconds", {}):
                ahead = " (standby engine)"
            c = r.get("compile")
            if c:
                hit = c.get("cacheHit", False)
                hits += hit
                compiled = f"compile {c.get('seconds', 0):6.2f} s{' (cache hit)' if hit else ''}"
            if status == "OK" and r.get("baseline"):
                st = r.get("stageSeconds", {})
                timed = (f"\n    reference in job {r['baseline'].get('wallPerIterUs', 0):6.2f} us, "
                         f"node {r.get('baselineNodeUs', 0):6.2f} us over {r.get('baselineNodeSamples', 0)}; "
                         f"compiles beside {r.get('compilesBeside', 0)}; word to time after "
                         f"{st.get('quiet_word', 0) * 1e3:.1f} ms, judges waited {st.get('bench_quiet', 0) * 1e3:.1f} ms")
    standby += bool(ahead)
    walls.append(t1 - t0)
    print(f"{tag:32s} {status:14s} submit to verdict {t1 - t0:7.2f} s  {compiled:28s}{ahead}{timed}")
total = end - start
print(f"\n{len(tags)} jobs in {total:.1f} s on {gpus} GPU(s): {len(tags) / total * 3600 / gpus:.0f} jobs "
      f"per hour per GPU ({total / len(tags):.2f} s a job); {standby} on a standby engine; "
      f"{hits} compile(s) from the cache")
PY
