#!/usr/bin/env bash
# The host's speed over time (issue 20): bench/host_drift/drift.cu built here and run for
# PKB_DRIFT_SECONDS (default 20) unpinned, then pinned to one core. Its summary says whether the
# launch path moves with the core's clock and how long a window must be to average the drift out.
#   step-drift.sh BIN OUT
set -uo pipefail
OUT=$2
SECONDS_EACH=${PKB_DRIFT_SECONDS:-20}
nvcc -O2 -std=c++17 -o "$OUT/drift" bench/host_drift/drift.cu || exit 1
echo "--- unpinned"
"$OUT/drift" "$SECONDS_EACH" "$OUT/drift-unpinned.csv"
echo "--- pinned to CPU 3"
taskset -c 3 "$OUT/drift" "$SECONDS_EACH" "$OUT/drift-pinned.csv"
rm -f "$OUT/drift"
