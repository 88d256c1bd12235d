#!/usr/bin/env bash
# Jobs per hour per GPU through the service (issue 22): bench/throughput/run.sh on the nine worked
# examples, PKB_THROUGHPUT_ROUNDS (default 2) rounds, W = 1. PKB_THROUGHPUT_COLD=1 makes every
# source new to the compile cache (run.sh).
# PKB_THROUGHPUT_PRIME=1: one round first, not counted, so that the node's compile cache of the
# examples and its settled baselines do not fall on the measured runs.
# PKB_THROUGHPUT_AB="FLAGS": the measured run twice, first with these coordinator flags alone (to
# $OUT/throughput-a), then with PKB_COORDINATOR_FLAGS (to $OUT/throughput). Compile ahead against
# none: PKB_COORDINATOR_FLAGS=--compile-ahead=true PKB_THROUGHPUT_AB=--compile-ahead=false.
# PKB_THROUGHPUT_AB_WORKER="FLAGS": the same for the worker's flags (against PKB_WORKER_FLAGS), e.g.
# PKB_THROUGHPUT_AB_WORKER="--compile-slots 2" PKB_WORKER_FLAGS="--compile-slots 4".
# PKB_THROUGHPUT_EXAMPLES="p001 p002": those examples only (run.sh).
BIN=$1; OUT=$2
bash scripts/device/make-layout.sh "$BIN" /tmp/pkb-layout-throughput || { echo "SKIPPED"; exit 0; }
ROUNDS=${PKB_THROUGHPUT_ROUNDS:-2}
if [ -n "${PKB_THROUGHPUT_PRIME:-}" ]; then
  echo "--- priming: one round, not counted"
  PKB_THROUGHPUT_COLD='' bash bench/throughput/run.sh /tmp/pkb-layout-throughput 1 "$OUT/throughput-prime" | tail -1
fi
if [ -n "${PKB_THROUGHPUT_AB:-}${PKB_THROUGHPUT_AB_WORKER:-}" ]; then
  echo "--- with the coordinator's ${PKB_THROUGHPUT_AB:-defaults}, the worker's ${PKB_THROUGHPUT_AB_WORKER:-defaults}"
  PKB_COORDINATOR_FLAGS="${PKB_THROUGHPUT_AB:-}" PKB_WORKER_FLAGS="${PKB_THROUGHPUT_AB_WORKER:-}" \
    bash bench/throughput/run.sh /tmp/pkb-layout-throughput "$ROUNDS" "$OUT/throughput-a"
  echo "--- with the coordinator's ${PKB_COORDINATOR_FLAGS:-defaults}, the worker's ${PKB_WORKER_FLAGS:-defaults}"
fi
bash bench/throughput/run.sh /tmp/pkb-layout-throughput "$ROUNDS" "$OUT/throughput"
