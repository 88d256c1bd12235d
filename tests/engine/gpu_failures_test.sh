#!/usr/bin/env bash
# GPU test: a faulting, hanging or crashing candidate fails its job with the right verdict and
# leaves no process and no GPU memory behind; the GPU stays usable (a correct example passes
# after each). Exits 77 (skipped) when there is no GPU.
set -uo pipefail
EVAL=${1:?usage: gpu_failures_test.sh PKB_EVAL [SOURCE_DIR]}
SRC=${2:-$(cd "$(dirname "$0")/../.." && pwd)}
RANK="$(dirname "$EVAL")/pkb-rank"
gpus=$("$RANK" probe 2>/dev/null || echo 0)
if [ "${gpus:-0}" -lt 1 ]; then
  echo "SKIPPED: no GPU on this machine (pkb-rank probe found none)"
  exit 77
fi
fail=0
status_of() { python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["status"]); sys.stderr.write(r["message"][:200] + "\n" + r.get("failed_rank_log","")[-400:] + "\n")'; }
check() {  # file expected [extra args]
  local f=$1 want=$2; shift 2
  local t0 got
  t0=$(date +%s)
  got=$("$EVAL" --json -p 1 -w 1 --warmup 10 --iters 10 "$@" "$SRC/tests/engine/gpu_candidates/$f" 2>/dev/null | status_of)
  local left
  left=$(pgrep -c pkb-rank || true)
  local mem
  mem=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
  if [ "$got" = "$want" ] && [ "${left:-0}" = 0 ]; then
    echo "ok   $f -> $got in $(( $(date +%s) - t0 )) s; rank processes left: 0; GPU memory used: ${mem} MiB"
  else
    echo "FAIL $f -> $got (expected $want); rank processes left: ${left}; GPU memory used: ${mem} MiB"; fail=1
  fi
  ok=$("$EVAL" --json -p 1 -w 1 --warmup 10 --iters 10 "$SRC/problems/examples/p001_allreduce_symm.cu" 2>/dev/null | status_of 2>/tmp/pkb-health-why)
  [ "$ok" = OK ] || cat /tmp/pkb-health-why
  [ "$ok" = OK ] && echo "     GPU healthy afterwards (p001 example OK)" || { echo "FAIL GPU unhealthy after $f: $ok"; fail=1; }
}
check p001_illegal_address.cu RUNTIME_ERROR
check p001_host_crash.cu RUNTIME_ERROR
check p001_barrier_timeout.cu RUNTIME_ERROR
check p001_infinite_kernel.cu TIMEOUT --timeout 8
exit $fail
