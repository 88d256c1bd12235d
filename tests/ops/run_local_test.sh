#!/usr/bin/env bash
# The main job's last step (scripts/run-local.sh, which scripts/main.sh ends with) on this build:
# a coordinator on SQLite, a local worker, the example submitted, and a verdict a newcomer can
# read. On a machine without a GPU the .cu example must end NO_DEVICE, said plainly, and the
# host-only example must then get a whole OK verdict with timings.
#   run_local_test.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
BUILD=${1:?usage: run_local_test.sh BUILD_DIR SOURCE_DIR}
SRC=${2:?usage: run_local_test.sh BUILD_DIR SOURCE_DIR}
out=$(bash "$SRC/scripts/run-local.sh" --build "$BUILD" 2>&1)
rc=$?
echo "$out"
fail=0
check() { if grep -q -- "$1" <<<"$out"; then echo "ok   $2"; else echo "FAIL $2"; fail=1; fi; }
[ $rc -eq 0 ] && echo "ok   exit code 0" || { echo "FAIL exit code $rc"; fail=1; }
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU; then
  check "verdict: OK" "the .cu example is OK on this GPU node"
else
  check "verdict: NO_DEVICE" "the .cu example compiles, then NO_DEVICE"
  check "No GPU on this machine" "said plainly"
  check "submit .*p001_allreduce_host.cc" "the host-only example is submitted"
  check "verdict: OK — correct on" "the host-only example gets a whole verdict"
  check "candidate [0-9.]* us per call (median of 5 rounds, [0-9.]*-[0-9.]*), baseline [0-9.]* us" \
    "with timings of both sides, the candidate's in rounds"
fi
exit $fail
