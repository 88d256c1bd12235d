#!/usr/bin/env bash
# Jobs per hour per GPU through the service (issue 22): bench/throughput/run.sh on the nine worked
# examples, PKB_THROUGHPUT_ROUNDS (default 2) rounds, W = 1.
BIN=$1; OUT=$2
bash scripts/device/make-layout.sh "$BIN" /tmp/pkb-layout-throughput || { echo "SKIPPED"; exit 0; }
bash bench/throughput/run.sh /tmp/pkb-layout-throughput "${PKB_THROUGHPUT_ROUNDS:-2}" "$OUT/throughput"
