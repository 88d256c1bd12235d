#!/usr/bin/env bash
# Jobs per hour per GPU through the service (issue 22): bench/throughput/run.sh on the nine worked
# examples, PKB_THROUGHPUT_ROUNDS (default 2) rounds, W = 1.
BIN=$1; OUT=$2
# The service's binaries are built here, not on the device (build-on-device.sh builds the engine's):
# they must be carried into $BIN with their libraries.
for b in pkb-coordinator pkb-worker pkb; do
  [ -x "$BIN/$b" ] || { echo "SKIPPED: no $BIN/$b (the device build makes the engine's binaries only)"; exit 0; }
done
bash scripts/device/make-layout.sh "$BIN" /tmp/pkb-layout-throughput
bash bench/throughput/run.sh /tmp/pkb-layout-throughput "${PKB_THROUGHPUT_ROUNDS:-2}" "$OUT/throughput"
