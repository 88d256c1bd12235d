#!/usr/bin/env bash
# GPU test: the nine worked examples get their expected verdicts on this node's GPUs at
# W = 1 .. number of GPUs (powers of two). Exits 77 (skipped) when there is no GPU.
set -uo pipefail
EVAL=${1:?usage: gpu_examples_test.sh PKB_EVAL [SOURCE_DIR]}
SRC=${2:-$(cd "$(dirname "$0")/../.." && pwd)}
RANK="$(dirname "$EVAL")/pkb-rank"
gpus=$("$RANK" probe 2>/dev/null || echo 0)
if [ "${gpus:-0}" -lt 1 ]; then
  echo "SKIPPED: no GPU on this machine (pkb-rank probe found none)"
  exit 77
fi
fail=0
check() {  # problem world file expected
  local out status
  out=$("$EVAL" --json -p "$1" -w "$2" "$SRC/problems/examples/$3" 2>/dev/null)
  status=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["status"])' <<<"$out")
  if [ "$status" = "$4" ]; then
    echo "ok   p$1 W=$2 $3 -> $status"
  else
    echo "FAIL p$1 W=$2 $3 -> $status (expected $4)"; echo "$out" | head -40; fail=1
  fi
}
w=1
while [ "$w" -le "$gpus" ]; do
  for ex in "1 p001_allreduce" "2 p002_allgather" "13 p013_gemm_allreduce"; do
    set -- $ex
    check "$1" "$w" "${2}_symm.cu" OK
    check "$1" "$w" "${2}_wrong.cu" MISMATCH
    check "$1" "$w" "${2}_broken.cu" COMPILE_ERROR
  done
  w=$((w * 2))
done
exit $fail
