#!/usr/bin/env bash
# The host's speed over time and between processes (issue 20): bench/host_drift/drift.cu built
# here, then
#   1. one process for PKB_DRIFT_SECONDS (default 20): does the launch path move with the core's
#      clock, and how long must a window be to average the drift out;
#   2. eight processes of 2 s each, pinned to one core, then eight unpinned: does each new process
#      land in a state of its own (the judges and hosts are new processes every job).
#   step-drift.sh BIN OUT
set -uo pipefail
OUT=$2
nvcc -O2 -std=c++17 -o "$OUT/drift" bench/host_drift/drift.cu || exit 1
echo "--- one process, unpinned"
"$OUT/drift" "${PKB_DRIFT_SECONDS:-20}" "$OUT/drift-long.csv"
echo "--- eight processes, pinned to CPU 3"
for i in 1 2 3 4 5 6 7 8; do taskset -c 3 "$OUT/drift" 2 /dev/null brief; done
echo "--- eight processes, unpinned"
for i in 1 2 3 4 5 6 7 8; do "$OUT/drift" 2 /dev/null brief; done
rm -f "$OUT/drift"
