#!/usr/bin/env bash
# The service end to end on the GPU node: coordinator + worker + CLI evaluate problem 1's example.
BIN=$1; OUT=$2
# The service's binaries are built here, not on the device (build-on-device.sh builds the engine's):
# they must be carried into $BIN with their libraries.
for b in pkb-coordinator pkb-worker pkb; do
  [ -x "$BIN/$b" ] || { echo "SKIPPED: no $BIN/$b (the device build makes the engine's binaries only)"; exit 0; }
done
layout=/tmp/pkb-layout
bash scripts/device/make-layout.sh "$BIN" $layout
s=$(date +%s%N)
bash scripts/run-local.sh --build $layout --world-size 1 problems/examples/p001_allreduce_symm.cu
e=$(date +%s%N); echo "service end to end (coordinator start to verdict, cold cache): $(( (e - s) / 1000000 )) ms"
