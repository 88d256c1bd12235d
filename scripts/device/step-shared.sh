#!/usr/bin/env bash
# Functional runs on a GPU node: W rank processes sharing its GPUs, started by the relocated
# OpenMPI's mpirun (.carry/openmpi, from build-on-device.sh build; gpu-run.sh sources its env.sh).
#   1. check: mpirun -np W problem_cpu_check --problem 0 --staged --device cuda, W = 2, 4, 8: every
#      reference on the GPUs through host-staged MPI against its oracle;
#   2. examples: the three worked examples and their wrong and broken twins through
#      pkb-eval --functional -w W, W = 2, 4, 8 (expected OK, MISMATCH, COMPILE_ERROR as at W=1:
#      they use symmetric memory and the device barrier, not NCCL);
#   3. failures: tests/engine/gpu_candidates with --functional at W=2 (expected as in
#      gpu_failures_test.sh), each followed by the p001 example to show the GPU still works.
# One line per run (verdict, seconds) on stdout, which gpu-run.sh tails into $OUT/summary.txt;
# the same lines in $OUT/shared-results.txt, and each run's JSON or log under $OUT/shared/.
#   bash scripts/device/step-shared.sh BIN OUT      (PKB_DEVICE_STEPS=shared gpu-run.sh)
#   PKB_SHARED_PARTS="check examples failures"  PKB_SHARED_WORLDS="2 4 8"  to run fewer;
#   PKB_SHARED_CHECK_TIMEOUT (s, default 240) bounds each problem_cpu_check run.
set -uo pipefail
BIN=${1:?usage: step-shared.sh BIN OUT}
OUT=${2:?usage: step-shared.sh BIN OUT}
PARTS=${PKB_SHARED_PARTS:-check examples failures}
WORLDS=${PKB_SHARED_WORLDS:-2 4 8}
LOGS=$OUT/shared
RESULTS=$OUT/shared-results.txt
mkdir -p "$LOGS"
: > "$RESULTS"
fail=0

say() { echo "$*" | tee -a "$RESULTS"; }
# What the previous command took, since $t0 (date +%s%N), in seconds.
took() { local ms=$(( ($(date +%s%N) - t0) / 1000000 )); echo "$((ms / 1000)).$((ms % 1000 / 100))"; }

mpirun_path=$(command -v mpirun || true)
if [ -z "$mpirun_path" ] || [ ! -x "$BIN/problem_cpu_check" ]; then
  say "FAIL no mpirun on PATH or no $BIN/problem_cpu_check: build with scripts/device/build-on-device.sh (it puts OpenMPI in .carry/openmpi) and run through gpu-run.sh (it sources .carry/openmpi/env.sh)"
  exit 1
fi
gpus=$("$BIN/pkb-rank" probe 2>/dev/null || echo 0)
say "mpirun $mpirun_path (OPAL_PREFIX=${OPAL_PREFIX:-unset}); GPUs: $gpus; W: $WORLDS"
if [ "${gpus:-0}" -lt 1 ]; then
  say "SKIPPED: no GPU on this machine (pkb-rank probe found none)"
  exit 0
fi

# pkb-eval --functional: $1 problem, $2 W, $3 source, $4 expected, $5 name of the run, then
# pkb-eval's extra flags.
evaluate() {
  local p=$1 w=$2 src=$3 want=$4 name=$5; shift 5
  local json=$LOGS/eval-$name-W$w.json got
  t0=$(date +%s%N)
  "$BIN/pkb-eval" --json --functional -p "$p" -w "$w" "$@" "$src" > "$json" 2> "$LOGS/eval-$name-W$w.err"
  local secs; secs=$(took)
  got=$(python3 - "$json" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print("NO_RESULT | pkb-eval wrote no JSON (%s)" % e); sys.exit()
print("%s | functional=%s gpus_used=%s | %s" % (r.get("status"), r.get("functional", False),
      r.get("gpus_used", 0), r.get("message", "").replace("\n", " ")[:110]))
PY
)
  local status=${got%% *}
  if [ "$status" = "$want" ]; then
    say "ok   W=$w $name -> $got ($secs s)"
  else
    say "FAIL W=$w $name -> $got (expected $want; $secs s; see shared/eval-$name-W$w.*)"
    fail=1
  fi
}

if [[ " $PARTS " == *" check "* ]]; then
  for w in $WORLDS; do
    log=$LOGS/check-W$w.log
    t0=$(date +%s%N)
    timeout "${PKB_SHARED_CHECK_TIMEOUT:-240}" mpirun --oversubscribe --allow-run-as-root \
      --bind-to none --mca btl self,vader -np "$w" \
      "$BIN/problem_cpu_check" --problem 0 --staged --device cuda > "$log" 2>&1
    rc=$?
    secs=$(took)
    last=$(grep -E '[0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
    if [ "$rc" = 0 ]; then
      say "ok   W=$w problem_cpu_check --problem 0 --staged --device cuda: $last ($secs s)"
    else
      why="exit $rc"; [ "$rc" = 124 ] && why="timed out"
      say "FAIL W=$w problem_cpu_check --problem 0 --staged --device cuda: $why, ${last:-no total} ($secs s; shared/check-W$w.log)"
      grep -E 'FAIL|error|Error' "$log" | head -5 | sed 's/^/     /' | tee -a "$RESULTS"
      fail=1
    fi
    # Problems that exclude the default 64 x 64 (19: N must be a multiple of 128) run again at
    # 128 x 256, which every problem's constraints admit.
    for id in $(grep -o '^rank 0: [0-9]*_[a-z0-9_]*: skipped by its own constraint' "$log" |
                sed 's/^rank 0: \([0-9]*\)_.*/\1/' | sort -un); do
      t0=$(date +%s%N)
      timeout "${PKB_SHARED_CHECK_TIMEOUT:-240}" mpirun --oversubscribe --allow-run-as-root \
        --bind-to none --mca btl self,vader -np "$w" "$BIN/problem_cpu_check" --problem "$id" \
        --m 128 --n 256 --staged --device cuda > "$LOGS/check-W$w-p$id.log" 2>&1
      rc=$?
      secs=$(took)
      last=$(grep -E '[0-9]+ passed, [0-9]+ failed' "$LOGS/check-W$w-p$id.log" | tail -1)
      if [ "$rc" = 0 ] && ! grep -q skipped "$LOGS/check-W$w-p$id.log"; then
        say "ok   W=$w problem_cpu_check --problem $id --m 128 --n 256: $last ($secs s)"
      else
        say "FAIL W=$w problem_cpu_check --problem $id --m 128 --n 256: exit $rc, ${last:-no total} ($secs s; shared/check-W$w-p$id.log)"
        fail=1
      fi
    done
  done
fi

if [[ " $PARTS " == *" examples "* ]]; then
  for w in $WORLDS; do
    for ex in "1 p001_allreduce" "2 p002_allgather" "13 p013_gemm_allreduce"; do
      read -r p name <<<"$ex"
      for v in "symm OK" "wrong MISMATCH" "broken COMPILE_ERROR"; do
        read -r variant want <<<"$v"
        evaluate "$p" "$w" "problems/examples/${name}_$variant.cu" "$want" "${name}_$variant"
      done
    done
  done
fi

if [[ " $PARTS " == *" failures "* ]]; then
  for c in "p001_illegal_address RUNTIME_ERROR" "p001_host_crash RUNTIME_ERROR" \
           "p001_barrier_timeout RUNTIME_ERROR" "p001_infinite_kernel TIMEOUT --timeout 8"; do
    read -r name want extra <<<"$c"
    # shellcheck disable=SC2086  # extra is flags or nothing
    evaluate 1 2 "tests/engine/gpu_candidates/$name.cu" "$want" "$name" --warmup 10 --iters 10 $extra
    # Nothing of the job left: no rank, no mpirun (a symlink to orterun: either name).
    left=0
    for n in pkb-rank mpirun orterun orted; do left=$((left + $(pgrep -c -x "$n" || true))); done
    mem=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
    say "     after $name: processes left (pkb-rank, mpirun) $left, GPU memory used $mem MiB"
    [ "$left" = 0 ] || fail=1
    # The GPU still works for the next job.
    evaluate 1 2 problems/examples/p001_allreduce_symm.cu OK "p001_after_$name"
  done
fi

say "step-shared: $(grep -c '^ok' "$RESULTS") ok, $(grep -c '^FAIL' "$RESULTS") failed"
exit $fail
