#!/usr/bin/env bash
# Submit to verdict through the service on this machine: a coordinator (SQLite), one local worker
# and `pkb submit` of the same candidate N times in a row (--no-cache: evaluated again each time,
# its compile cached after the first), with the worker's standby engine on (the default) and off
# (--no-standby-engine). Prints each submission's wall clock and the medians.
#
#   bash bench/eval_latency/service.sh [N] -- <pkb submit arguments, the candidate file last>
#
# Default: 5 submissions of docs/examples/p001_allreduce_host.cc (problem 1, W = 2, 256 x 256,
# a host-only candidate, so that it runs on a CPU machine). Needs a build in ./build
# ($PKB_BUILD_DIR). PKB_LATENCY_GAP (default 1): seconds between a verdict and the next submission,
# the worker's time between jobs, in which it starts the next engine. PKB_LATENCY_COLD=1: each
# submission's source gets a comment line of its own at the end, so that its compile misses the
# node's compile cache (a cold job); the first submission of each mode primes the node and is
# not counted in the median.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$(cd "${PKB_BUILD_DIR:-$root/build}" && pwd)"
n=5
if [[ $# -gt 0 && "$1" != "--" ]]; then n="$1"; shift; fi
[[ "${1:-}" == "--" ]] && shift
args=("$@")
if [[ ${#args[@]} -eq 0 ]]; then
  args=(--problem 1 --world-size 2 --m 256 --n 256 --practice "$root/docs/examples/p001_allreduce_host.cc")
fi
work="$(mktemp -d /tmp/pkb-latency.XXXXXX)"
chmod 711 "$work"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
"$build/server/pkb-coordinator" --listen 127.0.0.1:0 --port-file "$work/port" --db "$work/jobs.db" \
  --engine "$build/worker/engine/pkb-eval" >"$work/coordinator.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [[ -s "$work/port" ]] && break; sleep 0.1; done
address="127.0.0.1:$(cat "$work/port")"
run_worker() {
  "$build/worker/daemon/pkb-worker" --coordinator "$address" --engine "$build/worker/engine/pkb-eval" \
    --scratch "$work" --worker-id "w-$1" --compile-slots 0 "${@:2}" >"$work/worker-$1.log" 2>&1 &
  echo $!
}
for mode in standby no-standby; do
  flags=()
  [[ $mode == no-standby ]] && flags=(--no-standby-engine)
  wpid=$(run_worker "$mode" "${flags[@]}")
  sleep 2
  walls=()
  for i in $(seq "$n"); do
    if [[ "${PKB_LATENCY_COLD:-}" == 1 ]]; then
      src="${args[-1]}"
      cold="$work/cold-$mode-$i-$(basename "$src")"
      { cat "$src"; echo "// cold run $mode $i $$"; } > "$cold"
      run_args=("${args[@]:0:${#args[@]}-1}" "$cold")
    else
      run_args=("${args[@]}")
    fi
    t0=$(date +%s.%N)
    # The verdict's line (DONE), else the last line.
    all=$("$build/client/pkb" --coordinator "$address" submit "${run_args[@]}" --no-cache 2>&1)
    out=$(grep -m1 " DONE " <<<"$all" || tail -1 <<<"$all")
    t1=$(date +%s.%N)
    wall=$(python3 -c "print(f'{$t1 - $t0:.2f}')")
    [[ "${PKB_LATENCY_COLD:-}" == 1 && $i == 1 ]] || walls+=("$wall")
    echo "$mode $i: ${wall} s  ${out:0:100}"
    sleep "${PKB_LATENCY_GAP:-1}"  # the worker's time between jobs
  done
  echo "$mode: median $(printf '%s\n' "${walls[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}') s of ${#walls[@]}"
  kill -TERM "$wpid"; wait "$wpid" 2>/dev/null || true
done
