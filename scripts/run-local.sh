#!/usr/bin/env bash
# One command, the whole service on this machine: a coordinator on a SQLite file, one local worker,
# one submission of an example candidate with its verdict streamed, then both stopped.
#
#   scripts/run-local.sh [candidate.cu] [--problem N] [--world-size W] [--build DIR] [--keep]
#
# Defaults: problems/examples/p001_allreduce_symm.cu, problem 1, W = the GPU count (2 without a
# GPU), build folder ./build (or $PKB_BUILD_DIR). On a machine without a GPU the engine compiles
# the candidate and the verdict is NO_DEVICE: this script says so plainly, and then (with the
# default candidate) submits docs/examples/p001_allreduce_host.cc, a host-only C++ candidate of
# the same problem, for a whole verdict with timings on this machine's CPU.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
source_file="$root/problems/examples/p001_allreduce_symm.cu"
host_example=1  # no candidate given: on a GPU-less machine, also the host-only example
problem=1
world=""
build="${PKB_BUILD_DIR:-$root/build}"
keep=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --problem) problem="$2"; shift 2 ;;
    --world-size) world="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) source_file="$1"; host_example=0; shift ;;
  esac
done
build="$(cd "$build" && pwd)"  # the worker runs the engine from its own folders
coordinator="$build/server/pkb-coordinator"
worker="$build/worker/daemon/pkb-worker"
pkb="$build/client/pkb"
engine="$build/worker/engine/pkb-eval"
for b in "$coordinator" "$worker" "$pkb" "$engine"; do
  [[ -x "$b" ]] || { echo "run-local: $b is not built (cmake --build $build)" >&2; exit 2; }
done
[[ -f "$source_file" ]] || { echo "run-local: no candidate at $source_file" >&2; exit 2; }

gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then
  gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | grep -c . || true)
fi
if [[ -z "$world" ]]; then
  world=$(( gpus > 0 ? (gpus > 8 ? 8 : gpus) : 2 ))
fi

work="$(mktemp -d /tmp/pkb-local.XXXXXX)"
chmod 711 "$work"  # the engine's sandbox uid passes through to the job folders
pids=()
# Stops the worker first, while the coordinator still takes its last report (it may be running a
# confirmation run the coordinator queued; a TERM makes it finish that job and leave), then the
# coordinator. Each gets 30 s before it is killed.
stop() {
  kill -TERM "$1" 2>/dev/null || return 0
  for _ in $(seq 300); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}
cleanup() {
  for (( i=${#pids[@]}-1; i>=0; i-- )); do stop "${pids[$i]}"; done
  if [[ $keep == 0 ]]; then rm -rf "$work"; else echo "logs and database kept in $work"; fi
}
trap cleanup EXIT

echo "== coordinator (SQLite at $work/jobs.db)"
"$coordinator" --listen 127.0.0.1:0 --port-file "$work/port" --db "$work/jobs.db" --engine "$engine" \
  >"$work/coordinator.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [[ -s "$work/port" ]] && break; sleep 0.1; done
[[ -s "$work/port" ]] || { echo "run-local: the coordinator did not start:" >&2; cat "$work/coordinator.log" >&2; exit 1; }
address="127.0.0.1:$(cat "$work/port")"
echo "   listening on $address"
if [[ $gpus -gt 0 ]]; then
  echo "== worker ($gpus GPU(s))"
else
  echo "== worker (this machine has no GPU: candidates compile, then the verdict is NO_DEVICE)"
fi
"$worker" --coordinator "$address" --engine "$engine" --scratch "$work" >"$work/worker.log" 2>&1 &
pids+=($!)

echo "== submit $source_file (problem $problem, W=$world)"
start=$(date +%s%N)
set +e
"$pkb" --coordinator "$address" submit "$source_file" --problem "$problem" --world-size "$world" --no-cache
rc=$?
set -e
end=$(date +%s%N)
ms=$(( (end - start) / 1000000 ))
printf '== total %d.%03d s, pkb exit code %d\n' $((ms / 1000)) $((ms % 1000)) "$rc"
if [[ $rc == 17 ]]; then
  echo "== No GPU on this machine: the candidate compiled, but nothing could run. Run this on a GPU node for a real verdict."
  if [[ $host_example == 1 ]]; then
    # A whole verdict, timings included, without a GPU: the same problem as a host-only C++
    # candidate (language cpp), judged by the same engine on CPU through MPI.
    host="$root/docs/examples/p001_allreduce_host.cc"
    echo "== submit $host (a host-only C++ candidate: problem 1, W=$world, on this machine's CPU)"
    start=$(date +%s%N)
    set +e
    "$pkb" --coordinator "$address" submit "$host" --problem 1 --world-size "$world" --m 256 \
      --n 256 --no-cache
    rc=$?
    set -e
    end=$(date +%s%N)
    ms=$(( (end - start) / 1000000 ))
    printf '== total %d.%03d s, pkb exit code %d\n' $((ms / 1000)) $((ms % 1000)) "$rc"
    exit $rc
  fi
  exit 0  # the service did all a GPU-less machine can: not a failure of this script
fi
exit $rc
